"""What the demo shows: a live progress bar, the story as it happens, the final summary."""

from __future__ import annotations

import contextlib
import sys
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from reconciler.demo.workload import DemoJob
from reconciler.edge.percentile import percentile
from reconciler.edge.progress import Progress
from reconciler.simulate.metrics import seconds
from reconciler.simulate.recorder import Recorder
from reconciler.simulate.report import text_table

FINAL_PHASES = ("Finished", "Deleted")
HEARTBEAT_S = 5.0  # without a terminal, a progress line at most this often while the counts move


class Screen:
    """Stories on stdout with the time since start; the progress bar on stderr (see
    ``reconciler.edge.progress``: redrawn on a terminal, a line now and then otherwise)."""

    def __init__(self, *, out: TextIO | None = None, err: TextIO | None = None, quiet: bool = False) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.quiet = quiet
        self.started = time.monotonic()
        self._bar: Progress | None = None

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def say(self, text: str) -> None:
        with self._bar.paused() if self._bar is not None else contextlib.nullcontext():
            self.out.write(f"[{self.elapsed():6.1f}s] {text}\n")
            self.out.flush()

    def progress(self, *, submitted: int, total: int, status: str) -> None:
        if self._bar is None:
            self._bar = Progress(
                total=total,
                label="demo",
                unit="jobs submitted",
                threshold=0,
                enabled=not self.quiet,
                stream=self.err,
                heartbeat_s=HEARTBEAT_S,
            )
        self._bar.update(submitted, status=status)

    def done(self) -> None:
        if self._bar is not None:
            self._bar.close()


def progress_status(*, summary: Mapping[str, Any] | None, recorder: Recorder) -> str:
    """Jobs per phase, preemptions, and the clusters that are not Ready, on one short line."""
    phases: Counter[str] = Counter()
    health = []
    if summary is not None:
        phases.update(str(j.get("phase")) for j in summary.get("jobs", {}).values())
        for name, c in sorted(summary.get("clusters", {}).items()):
            h = str(c.get("health", "?"))
            if h != "Ready":
                health.append(f"{name}:{h}")
    order = ("Queued", "Nominated", "Placed", "Finished", "Suspended", "Unschedulable", "Deleted")
    counts = "  ".join(f"{p.lower()} {phases[p]}" for p in order if phases.get(p))
    parts = [counts] if counts else []
    parts.append(f"preemptions {recorder.preemptions}")
    if health:
        parts.append(" ".join(health))
    return "  | ".join(parts)


def cluster_table(recorder: Recorder, summary: Mapping[str, Any] | None, names: list[str]) -> str:
    rows = [
        [
            "cluster",
            "health",
            "placed",
            "finished",
            "preempted",
            "lost",
            "requeued by loss",
            "re-placed after loss",
            "finished there while lost",
        ]
    ]
    clusters = (summary or {}).get("clusters", {})
    for name in names:
        t = recorder.clusters.get(name)
        health = str(clusters.get(name, {}).get("health", "?"))
        if t is None:
            rows.append([name, health, *["0"] * 7])
            continue
        rows.append(
            [name, health]
            + [
                str(v)
                for v in (
                    t.placed,
                    t.finished,
                    t.preempted,
                    t.lost,
                    t.requeued_by_loss,
                    t.replaced_after_loss,
                    t.finished_while_lost,
                )
            ]
        )
    return text_table(rows)


def class_table(recorder: Recorder, jobs: list[DemoJob]) -> str:
    by_class: dict[str, list[int | None]] = {}
    finished: Counter[str] = Counter()
    records = {r.key: r for r in recorder.jobs.values()}
    for job in jobs:
        rec = records.get(job.key)
        by_class.setdefault(job.job_class, []).append(None if rec is None else rec.wait_ms)
        if rec is not None and rec.finished_ms is not None:
            finished[job.job_class] += 1
    rows = [["job class", "jobs", "finished", "wait p50 s", "wait p95 s", "max s"]]
    for cls, waits in sorted(by_class.items()):
        known = sorted(w for w in waits if w is not None)
        rows.append(
            [cls, str(len(waits)), str(finished[cls])]
            + [_fmt(seconds(percentile(known, p))) for p in (50, 95, 100)]
        )
    return text_table(rows)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def next_steps(*, data_dir: Path, job: str, kdispatch: str = "kdispatch", nats_server: str) -> str:
    """Commands to paste as they are: ``kdispatch`` is how this run was started (not on PATH after
    ``make demo``); the streams are read with ``kdispatch log`` (no ``nats`` CLI is installed)."""
    d, k = str(data_dir), kdispatch
    return "\n".join(
        [
            "Look further (the log stays in the data dir):",
            f"  {k} log --data-dir {d} | tail -40",
            f"  {k} log --data-dir {d} --subject 'kd.log.decision.>'",
            f"  {k} log --data-dir {d} --subject 'kd.log.cluster.>'",
            f"  {k} status --data-dir {d}                 # queues and clusters",
            f"  {k} queue --data-dir {d} --until 2000     # who waited, in dispatch order, at log seq 2000",
            f"  {k} explain {job} --data-dir {d}",
            f"  {k} replay --verify --data-dir {d}",
            f"  {k} log --data-dir {d} --json > demo-log.jsonl   # export, for replay/explain --file",
            "  # or serve the log on a port for other NATS clients:",
            f"  {nats_server} --jetstream --store_dir {d}/jetstream --port 4222 &",
        ]
    )
