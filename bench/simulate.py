"""Benchmark of ``kdispatch simulate`` on the Alibaba GPU trace (8,152 tasks), per profile.

Side by side in one process, for each default profile: the whole run (CPU seconds), the part
spent in the core (``fold`` + ``decide`` + ``next_deadline``) and the rest (the runner, the
simulated workers, the recorder) — the baseline that says how much of the time is the
simulator's own. Goal: under 60 s per profile. ``--capacity-scale`` runs it under contention
(e.g. 0.007), where ``decide`` dominates.

Run: ``.venv/bin/python bench/simulate.py [--capacity-scale F] [--limit N]``. The last line is
the headline figure.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgspec

from reconciler.simulate.profiles import PolicyDefaults, default_profiles
from reconciler.simulate.readers import load_trace
from reconciler.simulate.runner import CoreApi
from reconciler.simulate.scale import scale_capacity
from reconciler.simulate.session import run_profile

TRACE = Path(__file__).resolve().parent.parent / "data" / "traces" / "alibaba-gpu-v2023"
GOAL_S = 60.0
F = TypeVar("F", bound=Callable[..., Any])


class Timed:
    """The real core, with the CPU time of each call added up."""

    def __init__(self) -> None:
        self.cpu_s = 0.0
        real = CoreApi.real()
        self.api = CoreApi(
            new_state=real.new_state,
            fold=self._wrap(real.fold),
            decide=self._wrap(real.decide),
            next_deadline=self._wrap(real.next_deadline),
        )

    def _wrap(self, fn: F) -> F:
        def timed(*args: Any) -> Any:
            t0 = time.process_time()
            try:
                return fn(*args)
            finally:
                self.cpu_s += time.process_time() - t0

        return timed  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trace", type=Path, default=TRACE)
    parser.add_argument("--capacity-scale", type=float)
    parser.add_argument("--limit", type=int)
    args = parser.parse_args()
    trace = load_trace(args.trace)
    if args.capacity_scale is not None:
        trace = scale_capacity(trace, args.capacity_scale)
    if args.limit is not None:
        trace = msgspec.structs.replace(trace, jobs=trace.jobs[: args.limit])
    print(f"{len(trace.jobs)} jobs, {len(trace.clusters)} clusters, capacity scale {args.capacity_scale or 1}")
    print(f"{'profile':<14} {'total CPU s':>11} {'core s':>8} {'runner s':>9} {'core share':>10} {'entries':>9}")
    worst = 0.0
    for profile in default_profiles():
        timed = Timed()
        t0 = time.process_time()
        run = run_profile(trace, profile=profile, settings=PolicyDefaults(), core=timed.api)
        total = time.process_time() - t0
        worst = max(worst, total)
        rest = total - timed.cpu_s
        print(
            f"{profile.name:<14} {total:>11.1f} {timed.cpu_s:>8.1f} {rest:>9.1f} "
            f"{timed.cpu_s / total:>10.0%} {run.results['log_entries']:>9}"
        )
    verdict = "within" if worst < GOAL_S else "OVER"
    print(f"simulate: slowest profile {worst:.1f} s CPU for {len(trace.jobs)} jobs ({verdict} the {GOAL_S:.0f} s goal)")


if __name__ == "__main__":
    main()
