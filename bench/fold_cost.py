"""The fold alone: ``core_only``'s log of ``bench/leader_loop.py`` (the jobs' submissions and the
decisions about them, tenancy on) folded again on a fresh state, as a follower or a replay
folds it: CPU microseconds per entry.

    nice -n 10 .venv/bin/python bench/fold_cost.py [--jobs 20000] [--rounds 5]

The state before the jobs (policy, queues, clusters) is folded outside the timing; each round
folds the jobs' entries on a new state and the best round is printed (the machine is shared).
The last line is the headline figure.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.dispatch import Leader, queues_config
from bench.leader_loop import POLICY, QUEUES, clusters, job
from eventlog import events as ev
from reconciler.core import fold, new_state


class Recorder(Leader):
    """The bench's leader, keeping every entry it folds."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[ev.LogEntry] = []

    def _fold(self, event: ev.AnyEvent, batch: tuple[int, int] | None = None) -> None:
        self.seq += 1
        entry = ev.LogEntry(seq=self.seq, at_ms=self.now, event=event, batch=batch)
        self.log.append(entry)
        fold(self.state, entry)


def record(jobs: int, *, batch: int = 500) -> tuple[list[ev.LogEntry], int]:
    """``core_only``'s entries, and how many of them come before the jobs."""
    leader = Recorder()
    leader.inputs([POLICY, queues_config(QUEUES, 10), *clusters(50)])
    leader.decide()
    start = len(leader.log)
    for i in range(0, jobs, batch):
        leader.inputs([job(j) for j in range(i, min(i + batch, jobs))])
        leader.decide()
    return leader.log, start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.jobs < 1 or args.rounds < 1:
        parser.error("--jobs and --rounds must be at least 1")
    log, start = record(args.jobs)
    timed = log[start:]
    best: float | None = None
    by_type: dict[str, int] = defaultdict(int)
    for entry in timed:
        by_type[type(entry.event).__name__] += 1
    for _ in range(args.rounds):
        state = new_state()
        for entry in log[:start]:
            fold(state, entry)
        gc.collect()
        t0 = time.process_time()
        for entry in timed:
            fold(state, entry)
        took = time.process_time() - t0
        best = took if best is None else min(best, took)
    assert best is not None
    kinds = ", ".join(f"{n:,} {kind}" for kind, n in sorted(by_type.items()))
    print(f"entries folded: {len(timed):,} ({kinds})")
    print(f"fold: {best / len(timed) * 1e6:.2f} us of CPU per entry (best of {args.rounds} rounds)")


if __name__ == "__main__":
    main()
