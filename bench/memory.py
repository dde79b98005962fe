"""Bytes per pending job: the core's state after folding N fleet-shaped jobs, against baselines
measured in the same run.

    .venv/bin/python bench/memory.py [--jobs 100000] [--clusters 1000] [--baseline-code DIR] [--service | --service-only] [--trace]

``--baseline-code DIR`` is a checkout's root, e.g. the commit before a change:
``git archive COMMIT | tar -x -C /tmp/base``.

Each figure comes from its own child process (RSS does not shrink when Python frees, so one
process cannot measure two states). A child registers the clusters, folds a warm-up of 2,000
jobs, reads its RSS, then folds ``--jobs`` more and reads it again: the difference divided by the
jobs is the figure. Jobs are bench/fleet.py's (a handful of templates over 100 ClusterQueues in
10 cohorts, quota tight: about 98 % stay pending). Every entry is encoded and decoded before it
is folded, as a leader or a standby reads it from the log, so no two jobs share an object unless
the core makes them. Each batch of 1,000 is folded and decided, nominations answered as an idle
worker would, as bench/fleet.py's builder does.

Rows:
- ``events``: the decoded ``JobSubmitted`` events alone, kept in a list (what the submissions
  weigh before any state is built);
- ``interning off``: this code with the intern table switched off (``Interner(enabled=False)``);
- ``interned``: this code as it runs;
- ``restored``: the ``interned`` state dumped as a snapshot and loaded in a fresh process, as a
  standby restores it (RSS after the load minus before, the snapshot's bytes already read);
- ``restore peak``: the ``interned`` state as the leader stores it (``encode_state_snapshot``),
  restored in a fresh process through ``history.rebuild``'s own path (``_load_snapshot``) from a
  store that serves the file as ``JetStreamSnapshots`` serves the object from NATS (128 KiB chunks,
  each written in the default executor): the peak RSS (VmHWM) of the restore above the process's
  RSS before it, beside the RSS the restored state keeps. With ``--baseline-code``, the other
  checkout's own snapshot and restore in the same run;
- ``baseline code``: with ``--baseline-code DIR``, the same fold with the reconciler and eventlog
  of another checkout (e.g. the commit before the change), and its restore.

``--service`` adds what a leader holds besides the core state: the web API's rows of every job,
the actuator's projection of the jobs (with Kueue's sample Job as every job's manifest: traced
beside the state, and its RSS alone in a process of its own), and the
peak RSS (VmHWM, reset before each) of what it builds and drops: a ``/metrics`` scrape, a snapshot
on its way to the store, a start-time forecast. ``--service-only`` prints just those (one child
per checkout: about a minute at 20,000 jobs). ``--restore-only`` prints just the restore peak (a
fold and a restore per checkout). ``--trace`` adds tracemalloc runs of ``interned`` and ``interning
off`` and prints their top allocation sites by line. The last line is the headline figure.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import io
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parents[1]
FLOOR_MB = 2048.0
WARM_JOBS = 2000


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def settled_rss() -> int:
    gc.collect()
    return rss_bytes()


# ---- a child: one figure ------------------------------------------------------------------------


def child(args: argparse.Namespace) -> dict[str, Any]:
    # The reconciler and eventlog come from PYTHONPATH (this checkout or --baseline-code's);
    # bench/fleet.py is imported after them, so its own sys.path entry cannot shadow them.
    from eventlog import codec
    from eventlog import events as ev
    from eventlog.framing import decision_entries, input_entries
    from eventlog.store import InboxItem
    from reconciler import core

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import fleet  # bench/fleet.py: the fleet's shapes

    if args.mode == "actuator":
        return actuator_alone(args, fleet)
    if args.mode == "restore-peak":
        return restore_peak(Path(args.snapshot))
    if args.mode == "restore":
        raw = Path(args.snapshot).read_bytes()
        before = settled_rss()
        state = core.load_state(raw)
        after = settled_rss()
        return {"jobs": len(state.jobs), "pending": _pending(state), "rss": after - before}

    state = core.new_state()
    if args.mode == "off":
        from reconciler.core.intern import Interner

        state.interned = Interner(enabled=False)
    seq = 0
    now = 1_700_000_000_000

    def through_log(entry: ev.LogEntry) -> ev.LogEntry:
        return codec.decode_entry(codec.encode(entry))

    def step(inputs: Sequence[ev.InputEvent]) -> list[ev.DecisionEvent]:
        nonlocal seq, now
        now += 1
        framed, _ = input_entries(
            [InboxItem(inbox_seq=None, event=e) for e in inputs],
            last_seq=seq,
            last_inbox=0,
            at_ms=now,
            leader="bench",
        )
        for entry in framed:
            core.fold(state, through_log(entry))
        seq = framed[-1].seq
        decisions = core.decide(state)
        if decisions:
            framed = decision_entries(decisions, last_seq=seq, at_ms=now, leader="bench")
            for entry in framed:
                core.fold(state, through_log(entry))
            seq = framed[-1].seq
        return decisions

    def step_and_admit(inputs: Sequence[ev.InputEvent]) -> None:
        decisions = step(inputs)
        while acks := [
            ack
            for d in decisions
            if isinstance(d, ev.Nominated)
            for ack in (
                ev.RemoteCreated(job=d.job, cluster=d.clusters[0], attempt=d.attempt),
                ev.RemoteAdmitted(job=d.job, cluster=d.clusters[0], attempt=d.attempt),
            )
        ]:
            decisions = step(acks)

    rng = random.Random(16)
    jobs = [fleet.make_job(i, rng, args.queues, prefix="warm") for i in range(WARM_JOBS)]
    events: list[ev.JobSubmitted] = []
    if args.mode != "events":
        step_and_admit([fleet.POLICY, fleet.queues_config(args.queues, args.cohorts)])
        clusters = fleet.make_clusters(args.clusters, rng)
        for i in range(0, len(clusters), 1000):
            step_and_admit(list(clusters[i : i + 1000]))
        for i in range(0, WARM_JOBS, args.batch):
            step_and_admit(list(jobs[i : i + args.batch]))
    if args.trace:
        tracemalloc.start(1)
    before = settled_rss()
    traced = tracemalloc.get_traced_memory()[0] if args.trace else 0
    started = time.perf_counter()
    for start in range(0, args.jobs, args.batch):
        batch = [
            fleet.make_job(i, rng, args.queues) for i in range(start, min(start + args.batch, args.jobs))
        ]
        if args.mode == "events":
            events.extend(codec.decode_event(codec.encode(e)) for e in batch)  # type: ignore[misc]
        else:
            step_and_admit(list(batch))
    seconds = time.perf_counter() - started
    out: dict[str, Any] = {"rss": settled_rss() - before, "seconds": seconds}
    if args.trace:
        snapshot = tracemalloc.take_snapshot()
        out["traced"] = tracemalloc.get_traced_memory()[0] - traced
        tracemalloc.stop()
        out["top"] = [
            (str(stat.traceback[0]), stat.size, stat.count)
            for stat in snapshot.statistics("lineno")[: args.top]
        ]
    if args.mode == "events":
        out.update(jobs=len(events), pending=len(events))
        return out
    out.update(jobs=len(state.jobs) - WARM_JOBS, pending=_pending(state))
    if args.service:  # these cover every job of the state, the warm-up's too
        out.update(service(state), service_jobs=len(state.jobs))
    if args.snapshot:
        Path(args.snapshot).write_bytes(core.dump_state(state))
        out["snapshot_bytes"] = Path(args.snapshot).stat().st_size
        from reconciler.history import rebuild

        stored = rebuild.encode_state_snapshot(state, seq=state.seq, at_ms=state.now_ms, queues=state.queues)
        Path(f"{args.snapshot}.stored").write_bytes(stored)
        out["stored_bytes"] = len(stored)
    return out


class FileSnapshots:
    """A snapshot store over one file, serving it as ``JetStreamSnapshots`` serves the object
    from NATS: ``latest`` gathers nats-py's 128 KiB chunks into a ``BytesIO`` (what the code
    before restored from), ``latest_into`` hands each chunk to ``write`` in the default executor,
    one at a time (nats-py's ``get(writeinto=...)``). NATS's own buffers are not counted: its
    ordered consumer's flow control holds the server to a window of chunks."""

    CHUNK = 128 * 1024

    def __init__(self, path: Path) -> None:
        self.path = path

    async def latest(self, *, at_or_before: int | None = None) -> tuple[int, bytes] | None:
        buf = io.BytesIO()
        with self.path.open("rb") as f:
            while chunk := f.read(self.CHUNK):
                buf.write(chunk)
        return 1, buf.getvalue()

    async def latest_into(self, write: Any, *, at_or_before: int | None = None) -> int | None:
        loop = asyncio.get_running_loop()
        with self.path.open("rb") as f:
            while chunk := f.read(self.CHUNK):
                await loop.run_in_executor(None, write, chunk)
        return 1

    async def save(self, seq: int, data: bytes | bytearray) -> None:
        raise NotImplementedError("a stored snapshot read back for the restore-peak figure: never written to")


def restore_peak(stored: Path) -> dict[str, Any]:
    """A leader's restore of ``stored`` in this fresh process, through ``history.rebuild``: the
    peak RSS above the RSS before, and the RSS the restored state keeps."""
    from reconciler.edge.plugins import installed
    from reconciler.history import rebuild

    plugins = installed()  # discovered before the figure, as at a leader's start

    async def run() -> dict[str, Any]:
        await asyncio.get_running_loop().run_in_executor(None, gc.collect)  # the executor's thread exists
        before = settled_rss()
        Path("/proc/self/clear_refs").write_text("5")
        state, seq, *_ = await rebuild._load_snapshot(FileSnapshots(stored), at_or_before=1 << 62, plugins=plugins)
        peak = _status_kb("VmHWM") * 1024 - before
        assert seq > 0, "the snapshot was not restored"
        return {"jobs": len(state.jobs), "pending": _pending(state), "peak": peak, "rss": settled_rss() - before}

    return asyncio.run(run())


def service(state: Any) -> dict[str, int]:
    """What a leader holds besides the core state: the web API's rows of every job (made on the
    first request, kept until the next refresh), and the peaks of what it builds and drops: a
    ``/metrics`` scrape, a snapshot on its way to the store, a start-time forecast."""
    from reconciler.service.web.api import ViewSource

    before = settled_rss()
    board = ViewSource(state=lambda: state).board(state)
    made = {"board": settled_rss() - before}
    del board
    made["metrics_peak"] = peak_rss(lambda: _scrape(state))
    made["snapshot_peak"] = peak_rss(lambda: _snapshot_upload(state, made))
    made["forecast_peak"] = peak_rss(lambda: _forecast(state))
    made["actuator"] = actuator_projection(state)
    return made


def peak_rss(work: Any) -> int:
    """The most RSS ``work()`` added while it ran (its result is dropped after): the kernel's
    high-water mark (VmHWM), reset first by writing 5 to /proc/self/clear_refs."""
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")
    before = rss_bytes()
    result = work()
    peak = _status_kb("VmHWM") * 1024 - before
    del result
    return peak


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _scrape(state: Any) -> bytes:
    """One ``/metrics`` scrape while leading: the fleet gauges computed from the state."""
    from reconciler.service.metrics import ReconcilerMetrics

    metrics = ReconcilerMetrics()
    metrics.fleet.follow(lambda: state)
    return metrics.render()


def _snapshot_upload(state: Any, made: dict[str, int]) -> Any:
    """What ``LeaderLoop._snapshot`` holds while the upload runs: the stored object (and, before
    it was encoded in one pass, the core's dump beside it)."""
    from reconciler import core
    from reconciler.history import rebuild

    if hasattr(rebuild, "encode_state_snapshot"):
        stored = rebuild.encode_state_snapshot(state, seq=state.seq, at_ms=state.now_ms)
        made["snapshot_stored"] = len(stored)
        return stored
    dump = core.dump_state(state)  # the code before: the dump, and the stored object copying it
    stored = rebuild.encode_snapshot(rebuild.Snapshot(seq=state.seq, at_ms=state.now_ms, state=dump))
    made["snapshot_stored"] = len(stored)
    return dump, stored


def _forecast(state: Any) -> Any:
    """One start-time forecast as ``service/forecasts.py`` makes it (the first 100 waiting jobs)."""
    from reconciler import core
    from reconciler.forecast import DurationLearner, estimate_starts
    from reconciler.service import forecasts

    durations = DurationLearner().durations()
    if "own" in inspect.signature(estimate_starts).parameters:  # the dump is handed over, freed once loaded
        raw = bytearray()
        core.dump_state_into(state, raw)
        return forecasts._forecast([raw], state.plugins, state.now_ms, durations, 100)
    raw = core.dump_state(state)  # the code before: kept by the caller while the forecast runs
    return raw, forecasts._forecast(raw, state.plugins, state.now_ms, durations, 100)


def actuator_projection(state: Any) -> int:
    """Bytes (tracemalloc) of the actuator's projection (``clusters.desired.Desired``, in the
    leader's process unless ``serve --no-actuator``) of the state's jobs, each submitted with
    bench/sizing.py's manifest (Kueue's sample Job, as the webhook admits it): what it keeps of
    each job until the job ends, pending ones included. Not RSS: here it reuses what the figures
    before freed (``--mode actuator`` measures the RSS in a process of its own)."""
    from sizing import _manifest

    from eventlog import codec
    from eventlog import events as ev
    from reconciler.service.clusters.desired import Desired

    manifest = _manifest(0)  # each job decodes its own copy below, as from the log
    desired = Desired()
    tracemalloc.start(1)
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0]
    for seq, job in enumerate(state.jobs.values(), start=1):
        submitted = ev.JobSubmitted(job=job.ref, pod_sets=job.pod_sets, queue=job.queue, manifest=manifest)
        entry = ev.LogEntry(seq=seq, at_ms=seq, event=submitted)
        desired.fold(codec.decode_entry(codec.encode(entry)))
    gc.collect()
    held: int = tracemalloc.get_traced_memory()[0] - traced
    tracemalloc.stop()
    return held


def actuator_alone(args: argparse.Namespace, fleet: Any) -> dict[str, Any]:
    """The actuator's projection of ``--jobs`` fleet jobs submitted with Kueue's sample Job, in a
    process that built nothing before (no freed memory for it to reuse): its RSS per job."""
    from sizing import _manifest

    from eventlog import codec
    from eventlog import events as ev
    from reconciler.service.clusters.desired import Desired

    rng = random.Random(16)
    manifest = _manifest(0)
    desired = Desired()
    before = settled_rss()
    for seq in range(1, args.jobs + 1):
        job = msgspec.structs.replace(fleet.make_job(seq, rng, args.queues), manifest=manifest)
        desired.fold(codec.decode_entry(codec.encode(ev.LogEntry(seq=seq, at_ms=seq, event=job))))
    return {"rss": settled_rss() - before, "jobs": args.jobs, "pending": len(desired.jobs)}


def _pending(state: Any) -> int:
    return sum(1 for job in state.jobs.values() if job.phase in ("Queued", "Unschedulable"))


# ---- the parent: one child per figure -----------------------------------------------------------


def run_child(
    args: argparse.Namespace, mode: str, *, code: Path = ROOT, trace: bool = False, snapshot: str = ""
) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--role", "child", "--mode", mode, "--jobs", str(args.jobs)]
    argv += ["--clusters", str(args.clusters), "--queues", str(args.queues), "--cohorts", str(args.cohorts)]
    argv += ["--batch", str(args.batch), "--top", str(args.top)]
    argv += [*(["--trace"] if trace else []), *(["--snapshot", snapshot] if snapshot else [])]
    argv += ["--service"] if args.service and mode == "on" else []
    env = {**os.environ, "PYTHONPATH": str(code)}
    done = subprocess.run(argv, env=env, cwd=code, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} ({code}) failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def per_job(result: dict[str, Any], key: str, jobs: str = "jobs") -> float:
    return float(result[key]) / max(1, int(result[jobs]))


def show_row(name: str, result: dict[str, Any], base: float | None) -> None:
    rss = per_job(result, "rss")
    ratio = f"{rss / base:5.2f}x" if base else "   — "
    traced = f"{per_job(result, 'traced'):8,.0f}" if "traced" in result else "       —"
    took = f"{result['seconds']:6.1f} s" if "seconds" in result else "       —"
    print(
        f"  {name:28} {rss:8,.0f} B   {ratio}   {traced} B   {took}   {result['pending']:,} pending of {result['jobs']:,}",
        flush=True,
    )


def show_service(who: str, on: dict[str, Any]) -> None:
    def b(key: str) -> str:
        return f"{per_job(on, key, 'service_jobs'):,.0f} B/job"

    print(
        f"  {who}besides the core (leader): web API rows {b('board')} while kept; peaks while building: "
        f"a /metrics scrape {b('metrics_peak')}, a snapshot being stored {b('snapshot_peak')} "
        f"(stored object {b('snapshot_stored')}), a start-time forecast {b('forecast_peak')}; "
        f"the actuator's projection with Kueue's sample Job as manifest {b('actuator')} traced",
        flush=True,
    )


def show_restore_peak(who: str, result: dict[str, Any], stored: dict[str, Any]) -> None:
    peak, kept = per_job(result, "peak"), per_job(result, "rss")
    print(
        f"  {who}restore of its stored snapshot ({per_job(stored, 'stored_bytes', 'all_jobs'):,.0f} B/job stored): "
        f"peak {peak:,.0f} B/job above the process before, the state kept after {kept:,.0f} B/job "
        f"(peak {peak / kept:.2f}x the state; {peak - kept:,.0f} B/job held only during the restore); "
        f"a million jobs: peak ≈ {peak * 1e6 / 1e6:,.0f} MB, state ≈ {kept * 1e6 / 1e6:,.0f} MB",
        flush=True,
    )


def restore_rows(args: argparse.Namespace, tmp: str, *, who: str, code: Path, on: dict[str, Any] | None = None) -> dict[str, Any]:
    """The fold (unless ``on`` is given: its snapshot is in ``tmp``) and the restore peak of one checkout."""
    name = "old" if code != ROOT else "on"
    if on is None:
        on = run_child(args, "on", code=code, snapshot=f"{tmp}/{name}.snap")
    on["all_jobs"] = on["jobs"] + WARM_JOBS
    peak = run_child(args, "restore-peak", code=code, snapshot=f"{tmp}/{name}.snap.stored")
    show_restore_peak(who, peak, on)
    return peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=["parent", "child"], default="parent")
    parser.add_argument(
        "--mode", choices=["events", "off", "on", "restore", "restore-peak", "actuator"], default="on"
    )
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--clusters", type=int, default=1000)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--cohorts", type=int, default=10)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument(
        "--baseline-code", type=Path, help="another checkout's root: the same fold with its reconciler"
    )
    parser.add_argument(
        "--trace", action="store_true", help="also tracemalloc runs, with the top allocation sites"
    )
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument(
        "--service",
        action="store_true",
        help="also what a leader holds besides the core state (web rows, a snapshot)",
    )
    parser.add_argument(
        "--service-only",
        action="store_true",
        help="only the leader's figures besides the core state (one child, and one for --baseline-code)",
    )
    parser.add_argument(
        "--restore-only",
        action="store_true",
        help="only the restore's peak beside the restored state (a fold and a restore per checkout)",
    )
    parser.add_argument("--snapshot", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: give at least 1 job")
    if args.baseline_code is not None and not (args.baseline_code / "reconciler").is_dir():
        parser.error(f"--baseline-code {args.baseline_code}: not a kdispatch checkout (no reconciler/ there); "
                     "make one with `git worktree add DIR COMMIT` or `git archive COMMIT | tar -x -C DIR`")
    if args.role == "child":
        print(json.dumps(child(args)), flush=True)
        return

    print(
        f"memory: {args.jobs:,} fleet jobs ({args.queues} ClusterQueues, {args.clusters:,} clusters), "
        "each figure in its own process, per job folded",
        flush=True,
    )
    print(f"  {'':28} {'RSS/job':>10}   {'vs off':>6}   {'traced/job':>10}   {'build':>8}", flush=True)
    if args.service_only:
        args.service = True
        for who, code in (("", ROOT), ("baseline code: ", args.baseline_code)):
            if code is not None:
                result = run_child(args, "on", code=code)
                show_row(f"{who or 'this code: '}interned", result, None)
                show_service(who, result)
        return
    if args.restore_only:
        with tempfile.TemporaryDirectory() as tmp:
            restore_rows(args, tmp, who="this code: ", code=ROOT)
            if args.baseline_code is not None:
                restore_rows(args, tmp, who="baseline code: ", code=args.baseline_code)
        return
    with tempfile.TemporaryDirectory() as tmp:
        events = run_child(args, "events")
        show_row("events (decoded, in a list)", events, None)
        off = run_child(args, "off")
        base = per_job(off, "rss")
        show_row("interning off", off, base)
        on = run_child(args, "on", snapshot=f"{tmp}/on.snap")
        show_row("interned", on, base)
        restored = run_child(args, "restore", snapshot=f"{tmp}/on.snap")
        show_row("restored from its snapshot", restored, base)
        print(
            f"  snapshot: {on['snapshot_bytes'] / max(1, on['jobs'] + WARM_JOBS):,.0f} B per job", flush=True
        )
        restore_rows(args, tmp, who="", code=ROOT, on=on)
        if args.service:
            show_service("", on)
            alone = run_child(args, "actuator")
            print(
                f"  the actuator's projection alone, in its own process: {per_job(alone, 'rss'):,.0f} B/job of RSS",
                flush=True,
            )
        if args.baseline_code:
            old = run_child(args, "on", code=args.baseline_code, snapshot=f"{tmp}/old.snap")
            show_row("baseline code", old, base)
            if args.service:
                show_service("baseline code: ", old)
                alone = run_child(args, "actuator", code=args.baseline_code)
                print(
                    f"  baseline code, the actuator's projection alone, in its own process: {per_job(alone, 'rss'):,.0f} B/job of RSS",
                    flush=True,
                )
            show_row(
                "baseline code, restored",
                run_child(args, "restore", code=args.baseline_code, snapshot=f"{tmp}/old.snap"),
                base,
            )
            restore_rows(args, tmp, who="baseline code: ", code=args.baseline_code, on=old)
            print(
                f"  baseline snapshot: {old['snapshot_bytes'] / max(1, old['jobs'] + WARM_JOBS):,.0f} B per job",
                flush=True,
            )
        if args.trace:
            for mode in ("off", "on"):
                traced = run_child(args, mode, trace=True)
                show_row(f"traced: {'interned' if mode == 'on' else 'interning off'}", traced, None)
                for where, size, count in traced["top"]:
                    print(
                        f"      {size / traced['jobs']:7,.0f} B/job {count / traced['jobs']:5.2f} obj/job  {where}",
                        flush=True,
                    )
    rss = per_job(on, "rss")
    million = rss * 1_000_000 / 1e6
    print(
        f"memory: {rss:,.0f} B of RSS per job folded (interned) vs {base:,.0f} B with interning off ({rss / base:.2f}x); "
        f"restored {per_job(restored, 'rss'):,.0f} B; a million pending jobs ≈ {million:,.0f} MB of state "
        f"(floor: the whole process < {FLOOR_MB:,.0f} MB)",
        flush=True,
    )


if __name__ == "__main__":
    main()
