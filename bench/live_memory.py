"""Bytes of reconciler RSS per live job: a ``kdispatch serve``'s service (the wiring of
``reconciler/service/wiring.py``, as ``serve`` builds it) holding N waiting jobs, against a real
nats-server and the soak's Kubernetes stand-ins.

    .venv/bin/python bench/live_memory.py [--jobs 2000,10000] [--trace] [--baseline-code DIR]

Started here: a nats-server (eventlog.embedded), tests/soak/world.py (the manager's and three
workers' kmock API servers; the workers' nodes have no CPU, so every job waits, as the jobs the
60-minute soak held did), and the reconciler in a child process of its own. Jobs enter as in the
soak: the webhook's admission (``webhook.admit``, in this process) mutates and validates each
(bench/soak.py's job), its ``JobSubmitted`` goes to the inbox with the webhook's message id, and
the admitted object is stored on the manager stand-in, where the reconciler's manager watcher
lists and watches it. The reconciler leads, sequences, decides, writes each job's status
annotation and Events, and follows the workers.

The child's RSS is read once everything has settled at the first N (every job in the core state,
the watcher's view, the status view and the actuator's, every status written) and again at the
second: the difference over the jobs between is the figure (one process: RSS does not shrink,
so a warm-up is paid before the first reading, not counted). ``--trace`` runs the child under
tracemalloc too (one frame deep: deeper, the traced process is too slow to keep up on a loaded
machine) and prints the growth between the two readings by part (the module of the line that
allocated it: a decoded log entry counts as eventlog's, whoever keeps it) and the top 10 sites
by file:line; its RSS is then meaningless (tracemalloc's own).

The first N should be 2,000 or more: the actuator keeps that many recent ``JobSubmitted`` in a
bounded cache (``clusters/specs.py``, about 5 kB each here), which below it would count as per
job. The statuses are written at some 25 a second on a loaded machine, so 10,000 jobs take a few
minutes per checkout.

``--baseline-code DIR``: the same with the reconciler and eventlog of another checkout (e.g.
``git archive COMMIT | tar -x -C /tmp/base``), in the same run; the stand-ins and the admission
are this checkout's. The last line is the headline: bytes of RSS per live job.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SETTLE_TIMEOUT_S = 600.0


def rss_bytes(field: str = "VmRSS") -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


# ---- the child: a reconciler, answering "status" and "measure" on stdin --------------------------

PARTS = (  # (path prefix inside the checkout, part): the first that matches names it
    ("reconciler/core/", "core state"),
    ("reconciler/service/clusters/watch.py", "informers (ListWatch)"),
    ("reconciler/service/clusters/manager.py", "manager watcher / sync"),
    ("reconciler/service/clusters/api.py", "Kubernetes objects decoded (api.py)"),
    ("reconciler/service/clusters/backfill.py", "manager watcher / sync"),
    ("reconciler/service/clusters/visibility.py", "status reporter"),
    ("reconciler/service/clusters/jobview.py", "status view (jobview)"),
    ("reconciler/service/clusters/actuator.py", "actuator"),
    ("reconciler/service/clusters/desired.py", "actuator"),
    ("reconciler/service/clusters/", "clusters (other)"),
    ("reconciler/service/metrics.py", "metrics"),
    ("reconciler/service/forecasts.py", "forecasts"),
    ("reconciler/forecast/", "forecasts"),
    ("reconciler/service/loop.py", "leader loop"),
    ("reconciler/service/web/", "web/API"),
    ("reconciler/", "reconciler (other)"),
    ("eventlog/jetstream/", "NATS log client"),
    ("eventlog/", "eventlog (decoding)"),
)


def part_of(frames: Any, code_root: str) -> str:
    """Named by the innermost frame of the reconciler (the component that asked for the
    allocation: a log entry is decoded by eventlog for whichever reader consumes it), else of
    eventlog; a frame only in libraries is ``other``."""
    ours = []
    for frame in frames:  # most recent call first (tracemalloc's order)
        if frame.filename.startswith(code_root):
            ours.append(frame.filename[len(code_root) :].lstrip("/"))
    for rel in sorted(ours, key=lambda r: not r.startswith("reconciler/")):
        for prefix, part in PARTS:
            if rel.startswith(prefix):
                return part
    return "other (libraries, no frame of ours)"


def child_main(args: argparse.Namespace) -> None:
    if args.trace:
        tracemalloc.start(1)  # more frames: too slow on a loaded machine (the lease, the watches)
    asyncio.run(child_async(args))


async def child_async(args: argparse.Namespace) -> None:
    from eventlog.jetstream import connect
    from reconciler.config import load_config
    from reconciler.edge import logging as klog
    from reconciler.edge.plugins import installed
    from reconciler.policy import policy_event
    from reconciler.service.loop import LoopSettings
    from reconciler.service.wiring import Settings, build

    klog.configure(level="warning", role="serve", replica="bench")
    config = load_config(args.config)
    jlog = await connect(args.nats, data_dir=args.data_dir, name="bench-live-memory")
    settings = Settings(
        loop=LoopSettings(leader_id="bench", policy=policy_event(config.policy), plugins=installed()),
        watch_queues=True,
        metrics_port=0,
        lease_ttl_s=60.0,  # one replica: a starved (traced) process must not lose its term
    )
    system = await build(jlog, config, settings)
    await system.start()
    code_root = str(Path(args.code_root).resolve())
    snapshots: list[Any] = []
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    def counts() -> dict[str, Any]:
        clusters = system.clusters
        assert clusters is not None and clusters.watcher is not None and clusters.status is not None
        state = system.loop.state if system.loop.ready.is_set() else None
        return {
            "state": len(state.jobs) if state is not None else -1,
            "watcher": len(clusters.watcher._seen),
            "view": len(clusters.status.view.jobs),
            "desired": len(clusters.actuator.desired.submitted),
            "status_settled": clusters.status.settled(),
            "status_written": clusters.status.status_written,
            "events_written": clusters.status.events_written,
        }

    try:
        while True:
            line = (await reader.readline()).decode().strip()
            if not line or line == "stop":
                break
            out: dict[str, Any] = counts()
            if line == "measure":
                gc.collect()
                out["rss"] = rss_bytes()
                out["peak"] = rss_bytes("VmHWM")
                if args.trace:
                    snapshots.append(tracemalloc.take_snapshot())
                    out["traced"] = tracemalloc.get_traced_memory()[0]
                    if len(snapshots) == 2:
                        out["diff"] = trace_diff(snapshots[0], snapshots[1], code_root)
            sys.stdout.write(json.dumps(out) + "\n")
            sys.stdout.flush()
    finally:
        await system.stop(grace_s=5.0)
        await jlog.close()


def trace_diff(before: Any, after: Any, code_root: str) -> dict[str, Any]:
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib._bootstrap>")]
    before, after = before.filter_traces(ignore), after.filter_traces(ignore)
    parts: dict[str, int] = {}
    for stat in after.compare_to(before, "traceback"):
        part = part_of(stat.traceback, code_root)
        parts[part] = parts.get(part, 0) + stat.size_diff
    sites = []
    for stat in after.compare_to(before, "lineno")[:10]:
        frame = stat.traceback[0]
        where = frame.filename
        for prefix in (code_root + "/", sys.prefix, sys.base_prefix):
            where = where.removeprefix(prefix)
        sites.append([f"{where}:{frame.lineno}", stat.size_diff, stat.count_diff])
    return {"parts": parts, "sites": sites}


# ---- the parent: stand-ins, admission, load ---------------------------------------------------------


def write_config(path: Path, world: dict[str, Any], data_dir: Path) -> Path:
    """bench/soak.py's config, on one NATS node without authorization."""
    import yaml

    sys.path.insert(0, str(ROOT))
    from bench.soak import service_config

    path.write_text(yaml.safe_dump(service_config(path, world=world, data_dir=data_dir, manager_id="bench")))
    return path


class Admission:
    """The webhook's part of a CREATE, in process: /mutate, the patch applied, a uid, /validate."""

    def __init__(self) -> None:
        import msgspec

        from reconciler.demo.apiserver import apply_patch, review
        from webhook import admit
        from webhook.review import AdmissionRequest

        self._convert = lambda doc: msgspec.convert(doc, AdmissionRequest)
        self._admit, self._apply, self._review = admit, apply_patch, review
        self._settings = admit.Settings()

    def create(self, obj: dict[str, Any]) -> tuple[dict[str, Any], Any, str]:
        mutated = self._admit.mutate(self._convert(self._review(obj)["request"]), self._settings)
        assert mutated.allowed, mutated.response
        final = obj
        if mutated.response.patch:
            final = self._apply(obj, json.loads(base64.b64decode(mutated.response.patch)))
        final["metadata"]["uid"] = str(uuid.uuid4())
        validated = self._admit.validate(self._convert(self._review(final)["request"]), self._settings)
        assert validated.allowed and validated.records, validated.response
        record = validated.records[0]
        return final, record.event, record.msg_id


class Child:
    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log.open("wb")
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env, start_new_session=True
        )

    def ask(self, what: str) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write((what + "\n").encode())
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the reconciler child exited ({self.proc.wait()}); its log: {self.log.name}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def stop(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.ask_nothing()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def ask_nothing(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"stop\n")
        self.proc.stdin.flush()


def settled(c: dict[str, Any], n: int) -> bool:
    return (
        c["state"] >= n and c["watcher"] >= n and c["view"] >= n and c["desired"] >= n and c["status_settled"]
    )


async def submit(jlog: Any, control: str, admission: Admission, first: int, count: int) -> None:
    import aiohttp

    sys.path.insert(0, str(ROOT))
    from bench.soak import NAMESPACES, user_job

    batch = 500
    async with aiohttp.ClientSession() as session:
        gate = asyncio.Semaphore(16)

        async def store(obj: dict[str, Any]) -> None:
            async with gate, session.post(control + "/submit", json=obj) as resp:
                resp.raise_for_status()

        for start in range(first, first + count, batch):
            admitted = [
                admission.create(user_job(f"live-{i:07d}", NAMESPACES[i % len(NAMESPACES)]))
                for i in range(start, min(start + batch, first + count))
            ]
            # As the webhook: recorded first (answered allowed once published), then stored.
            await jlog.inbox.publish_many([(e, m) for _, e, m in admitted], timeout_s=30.0)
            await asyncio.gather(*(store(obj) for obj, _, _ in admitted))


def wait_settled(child: Child, n: int, who: str) -> dict[str, Any]:
    end = time.monotonic() + SETTLE_TIMEOUT_S
    last: dict[str, Any] = {}
    stable = 0
    said = time.monotonic()
    while time.monotonic() < end:
        c = child.ask("status")
        if time.monotonic() - said > 20:
            said = time.monotonic()
            print(f"  {who}: settling at {n:,}: {c}", flush=True)
        # Settled twice in a row with nothing more written in between: the writes have stopped.
        if settled(c, n) and c["status_written"] == last.get("status_written") and c["events_written"] == last.get("events_written"):
            stable += 1
            if stable >= 2:
                return c
        else:
            stable = 0
        last = c
        time.sleep(1.0)
    raise RuntimeError(f"{who}: not settled at {n} jobs after {SETTLE_TIMEOUT_S:.0f} s: {last}")


def run_one(args: argparse.Namespace, code_root: Path, who: str) -> dict[str, Any]:
    """One reconciler (this checkout's or the baseline's) from nothing to the two readings."""
    from eventlog.embedded import EmbeddedNats
    from eventlog.jetstream import connect

    sizes = args.jobs
    with tempfile.TemporaryDirectory(prefix="live-memory-") as tmp:
        root = Path(tmp)
        nats = EmbeddedNats(data_dir=root / "nats").start()
        world_proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests/soak/world.py"), "--dir", str(root), "--workers", "3", "--node-cpus", "0"],
            stdout=(root / "world.log").open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        child: Child | None = None
        try:
            doc_path = root / "world.json"
            end = time.monotonic() + 60
            while not doc_path.exists():
                if world_proc.poll() is not None or time.monotonic() > end:
                    raise RuntimeError(f"the stand-ins did not start: {(root / 'world.log').read_text()[-2000:]}")
                time.sleep(0.2)
            world = json.loads(doc_path.read_text())
            config = write_config(root / "config.yaml", world, root / "data")
            env = {**os.environ, "PYTHONPATH": str(code_root)}
            argv = [sys.executable, str(Path(__file__).resolve()), "--child", "--config", str(config)]
            argv += ["--nats", nats.url, "--data-dir", str(root / "data"), "--code-root", str(code_root)]
            argv += ["--trace"] if args.trace else []
            child = Child(argv, env, root / f"reconciler-{who}.log")
            admission = Admission()

            async def load(first: int, count: int) -> None:
                jlog = await connect(nats.url, data_dir=str(root / "data"), name="bench-load")
                try:
                    await submit(jlog, world["control"], admission, first, count)
                finally:
                    await jlog.close()

            readings = []
            done = 0
            for n in sizes:
                t0 = time.monotonic()
                asyncio.run(load(done, n - done))
                done = n
                c = wait_settled(child, n, who)
                reading = child.ask("measure")
                reading["seconds"] = time.monotonic() - t0
                readings.append(reading)
                print(
                    f"  {who}: {n:,} jobs held: RSS {reading['rss'] / 2**20:,.1f} MiB "
                    f"(peak {reading['peak'] / 2**20:,.1f}) "
                    f"({c['status_written']:,} statuses, {c['events_written']:,} Events written; {reading['seconds']:.0f} s)",
                    flush=True,
                )
            return {"readings": readings}
        finally:
            if child is not None:
                child.stop()
            world_proc.send_signal(signal.SIGTERM)
            try:
                world_proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                world_proc.kill()
            nats.stop()


def per_job(result: dict[str, Any], key: str, jobs: int) -> float:
    a, b = result["readings"]
    return float(b[key] - a[key]) / jobs


def show(who: str, result: dict[str, Any], jobs: int) -> None:
    print(f"{who}: RSS {per_job(result, 'rss', jobs):,.0f} B per live job", flush=True)
    diff = result["readings"][1].get("diff")
    if diff is None:
        return
    print(f"  traced (tracemalloc) {per_job(result, 'traced', jobs):,.0f} B per live job, by part:")
    for part, size in sorted(diff["parts"].items(), key=lambda kv: -kv[1]):
        if abs(size) >= jobs * 10:
            print(f"    {part:<40} {size / jobs:>8,.0f} B/job")
    print("  top 10 sites (file:line, growth):")
    for where, size, count in diff["sites"]:
        print(f"    {where:<60} {size / jobs:>8,.0f} B/job  {count / jobs:>6.2f} objects/job")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", default="2000,10000", help="the two numbers of held jobs (default 2000,10000)")
    p.add_argument("--trace", action="store_true", help="tracemalloc in the reconciler: growth by part and site")
    p.add_argument("--baseline-code", type=Path, help="a checkout's root to measure the same way")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    p.add_argument("--nats", help=argparse.SUPPRESS)
    p.add_argument("--data-dir", help=argparse.SUPPRESS)
    p.add_argument("--code-root", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child_main(args)
        return 0
    try:
        args.jobs = sorted(int(x) for x in str(args.jobs).split(","))
    except ValueError:
        p.error(f"--jobs: two positive numbers, comma-separated (e.g. 2000,10000), not {args.jobs!r}")
    if len(args.jobs) != 2 or args.jobs[0] <= 0 or args.jobs[0] == args.jobs[1]:
        p.error(f"--jobs: two different positive numbers, comma-separated (e.g. 2000,10000), not {args.jobs}")
    if args.baseline_code is not None and not (args.baseline_code / "reconciler" / "__init__.py").exists():
        p.error(f"--baseline-code {args.baseline_code}: not a kdispatch checkout (no reconciler/__init__.py)")
    sys.path.insert(0, str(ROOT))
    # A timeout's SIGTERM ends the run through its cleanup: the servers and the child stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    jobs = args.jobs[1] - args.jobs[0]
    print(f"live jobs: {args.jobs[0]:,} then {args.jobs[1]:,} (all waiting); figures over the {jobs:,} between")
    results = {"this code": run_one(args, ROOT, "this code")}
    if args.baseline_code is not None:
        results["baseline code"] = run_one(args, args.baseline_code.resolve(), "baseline code")
    for who, result in results.items():
        show(who, result, jobs)
    this = per_job(results["this code"], "rss", jobs)
    line = f"reconciler RSS per live job: {this:,.0f} B"
    if "baseline code" in results:
        base = per_job(results["baseline code"], "rss", jobs)
        line += f" (baseline code {base:,.0f} B: {base / this:.2f}x)" if this > 0 else f" (baseline code {base:,.0f} B)"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
