"""What fetching a snapshot object from NATS holds: ``latest_into`` (pieces handed to a writer as
slow as a restore) against ``latest`` (the object whole), on a real nats-server.

    .venv/bin/python bench/snapshot_fetch.py [--mb 200] [--delay-ms 5]

A restore decodes about 25 MB of snapshot per second on the loaded test machine (a 128 KiB chunk
in about 5 ms); if nats-py buffered what the server sends faster than that, the streamed restore
would hold the object after all. Each figure is the peak RSS (VmHWM, reset first) above the RSS
before, in its own process (freed memory is not given back to the OS reliably).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


async def child(url: str, how: str, delay_ms: float) -> dict[str, Any]:
    from eventlog.jetstream import connect

    jlog = await connect(url, root="fetch")
    got = 0

    def write(piece: bytes) -> None:
        nonlocal got
        got += len(piece)
        time.sleep(delay_ms / 1000)  # a restore's decoding of the piece

    await asyncio.get_running_loop().run_in_executor(None, gc.collect)  # the executor's thread exists
    before = _kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    started = time.perf_counter()
    if how == "streamed":
        await jlog.snapshots.latest_into(write)
    else:
        found = await jlog.snapshots.latest()
        assert found is not None
        got = len(found[1])
    out = {"peak_mb": (_kb("VmHWM") - before) / 1024, "mb": got / (1 << 20), "s": time.perf_counter() - started}
    await jlog.close()
    return out


async def parent(args: argparse.Namespace) -> None:
    from eventlog.embedded import EmbeddedNats
    from eventlog.jetstream import connect

    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedNats(data_dir=Path(tmp) / "nats")
        server.start()
        try:
            jlog = await connect(server.url, root="fetch")
            await jlog.snapshots.save(1, bytearray(args.mb << 20))
            await jlog.close()
            for how in ("streamed", "whole"):
                argv = [sys.executable, __file__, "--child", how, "--url", server.url]
                argv += ["--delay-ms", str(args.delay_ms)]
                done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True)
                r = json.loads(done.stdout.strip().splitlines()[-1])
                what = f"latest_into, {args.delay_ms:g} ms per chunk" if how == "streamed" else "latest (whole)"
                print(
                    f"  {what:32} {r['mb']:6.0f} MB in {r['s']:5.1f} s: peak {r['peak_mb']:7.1f} MB above before",
                    flush=True,
                )
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="the snapshot object's size")
    parser.add_argument("--delay-ms", type=float, default=5.0, help="the writer's time per 128 KiB chunk")
    parser.add_argument("--child", choices=["streamed", "whole"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mb < 1:
        parser.error(f"--mb {args.mb}: give at least 1")
    if args.child:
        print(json.dumps(asyncio.run(child(args.url, args.child, args.delay_ms))), flush=True)
        return
    print(f"snapshot fetch: a {args.mb} MB object from a real nats-server, each way in its own process", flush=True)
    asyncio.run(parent(args))


if __name__ == "__main__":
    main()
