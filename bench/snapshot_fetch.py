"""What fetching a snapshot object from NATS holds: ``latest_into`` (pieces handed to a writer as
slow as a restore) against ``latest`` (the object whole), on a real nats-server.

    .venv/bin/python bench/snapshot_fetch.py [--mb 200] [--delay-ms 5]
    .venv/bin/python bench/snapshot_fetch.py --stored FILE [--code DIR]   # a leader's restore of FILE from NATS

With ``--stored`` (a stored snapshot, e.g. what ``bench/memory.py``'s fold writes as
``encode_state_snapshot``), the object is that file, and the child restores it through
``history/rebuild.py``'s own path with the reconciler of ``--code`` (a checkout; default this one):
its peak RSS during the restore and the RSS it keeps after, per job.

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
import os
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


async def restore_child(url: str) -> dict[str, Any]:
    from eventlog.jetstream import connect
    from reconciler.edge.plugins import installed
    from reconciler.history import rebuild

    plugins = installed()
    jlog = await connect(url, root="fetch")
    await asyncio.get_running_loop().run_in_executor(None, gc.collect)  # the executor's thread exists
    gc.collect()
    before = _kb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    started = time.perf_counter()
    state, seq, *_ = await rebuild._load_snapshot(jlog.snapshots, at_or_before=1 << 62, plugins=plugins)
    peak = _kb("VmHWM") - before
    seconds = time.perf_counter() - started
    if seq <= 0:  # _load_snapshot logs why (snapshot_unusable) and starts from nothing
        raise SystemExit("the stored snapshot could not be read: not a snapshot kdispatch stores (history/rebuild.py), or damaged")
    gc.collect()
    out = {"jobs": len(state.jobs), "peak_b": peak * 1024, "kept_b": (_kb("VmRSS") - before) * 1024, "s": seconds}
    await jlog.close()
    return out


async def child(url: str, how: str, delay_ms: float) -> dict[str, Any]:
    from eventlog.jetstream import connect

    if how == "restore":
        return await restore_child(url)
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
            data = bytearray(args.stored.read_bytes()) if args.stored else bytearray(args.mb << 20)
            await jlog.snapshots.save(1, data)
            del data
            await jlog.close()
            if args.stored:
                argv = [sys.executable, __file__, "--child", "restore", "--url", server.url]
                env = {**os.environ, "PYTHONPATH": str(args.code)}
                done = subprocess.run(argv, cwd=args.code, env=env, capture_output=True, text=True, check=False)
                if done.returncode != 0:
                    last = done.stderr.strip().splitlines()[-1:] or ["(no output)"]
                    raise SystemExit(f"--stored {args.stored}: the restore ({args.code}) failed: {last[0]}")
                r = json.loads(done.stdout.strip().splitlines()[-1])
                peak, kept = r["peak_b"] / r["jobs"], r["kept_b"] / r["jobs"]
                print(
                    f"  {args.code}: {r['jobs']:,} jobs restored from NATS in {r['s']:.1f} s: peak {peak:,.0f} B/job "
                    f"above the process before, {kept:,.0f} B/job kept after (peak {peak / kept:.2f}x)",
                    flush=True,
                )
                return
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
    parser.add_argument("--stored", type=Path, help="a stored snapshot: restore it from NATS instead")
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose reconciler restores --stored")
    parser.add_argument("--child", choices=["streamed", "whole", "restore"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mb < 1:
        parser.error(f"--mb {args.mb}: give at least 1")
    if args.stored is not None and not args.stored.is_file():
        parser.error(f"--stored {args.stored}: no such file")
    if not (args.code / "reconciler").is_dir():
        parser.error(f"--code {args.code}: not a kdispatch checkout (no reconciler/ there)")
    if args.child:
        print(json.dumps(asyncio.run(child(args.url, args.child, args.delay_ms))), flush=True)
        return
    what = f"{args.stored} ({args.stored.stat().st_size >> 20} MB)" if args.stored else f"a {args.mb} MB object"
    print(f"snapshot fetch: {what} from a real nats-server, each figure in its own process", flush=True)
    asyncio.run(parent(args))


if __name__ == "__main__":
    main()
