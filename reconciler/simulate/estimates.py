"""How far off was "when will my job start?": for each job, the start the forecast
(``reconciler.forecast``) gave when it was submitted, against when it actually started in the run.

The estimate is made where the leader would make it: on the state ``decide`` is about to see in
the batch that brought the submission (jobs submitted together are estimated together), with the
durations learned from the run's log so far (no expected-duration annotations in traces: each
queue's median run time, or the 30 min default before any job finished). The trace's runtimes
are never read: they are the truth being estimated.

Each forecast copies the whole state, so on long traces the cost of one per submission would grow
with the square of the trace: the jobs measured are every ``every``-th submission, ``every``
chosen so that at most ``MAX_SAMPLES`` are (every job of a trace up to that size).

``results()`` is ``profiles[P].start_estimate`` in ``results.json``: the median and p90 absolute
error in seconds over the jobs that had an estimate and started, how many had none (behind the
first ``limit`` in dispatch order, or not startable within the forecast's horizon), and the
sampling stride.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from eventlog import events as ev
from reconciler import core as core_
from reconciler.edge.percentile import percentile
from reconciler.forecast import DurationLearner, estimate_starts
from reconciler.simulate.runner import CoreApi

LIMIT = 1000  # waiting jobs ahead of a new one that the forecast plays out
MAX_SAMPLES = 200


def sampling_stride(jobs: int) -> int:
    """Every how many submissions one is measured, so that at most ``MAX_SAMPLES`` are."""
    return max(1, -(-jobs // MAX_SAMPLES))


class StartEstimates:
    """An observer of the run's log and a hook on ``decide`` (``wrap``)."""

    def __init__(self, *, limit: int = LIMIT, every: int = 1) -> None:
        self.limit = limit
        self.every = every
        self.submitted = 0
        self.learner = DurationLearner()
        self.new: list[str] = []  # submitted since the last decide
        self.estimated: dict[str, int | None] = {}  # job key -> estimated start (None: none)
        self.started: dict[str, int] = {}  # job key -> first Placed

    def observe(self, entry: ev.LogEntry) -> None:
        self.learner.observe(entry)
        e = entry.event
        if isinstance(e, ev.JobSubmitted):
            if self.submitted % self.every == 0:
                self.new.append(f"{e.job.namespace}/{e.job.name}")
            self.submitted += 1
        elif isinstance(e, ev.Placed):
            self.started.setdefault(f"{e.job.namespace}/{e.job.name}", entry.at_ms)

    def wrap(self, core: CoreApi) -> CoreApi:
        """``core`` whose ``decide`` first estimates the jobs submitted since the last one."""
        decide = core.decide

        def estimating_decide(state: Any) -> list[ev.DecisionEvent]:
            self.before_decide(state)
            return decide(state)

        return dataclasses.replace(core, decide=estimating_decide)

    def before_decide(self, state: Any) -> None:
        if not self.new:
            return
        keys, self.new = self.new, []
        if not isinstance(state, core_.State):  # a stand-in core (tests): nothing to forecast
            return
        found = estimate_starts(
            state, now_ms=state.now_ms, durations=self.learner.durations(), limit=self.limit, only=set(keys)
        )
        for key in keys:
            estimate = found.get(key)
            self.estimated.setdefault(key, estimate.start_ms if estimate is not None else None)

    def results(self) -> dict[str, Any]:
        errors = [
            abs(self.started[k] - at) / 1000
            for k, at in self.estimated.items()
            if at is not None and k in self.started
        ]
        return {
            "median_abs_error_s": _round(percentile(errors, 50)),
            "p90_abs_error_s": _round(percentile(errors, 90)),
            "jobs": len(errors),
            "without_estimate": sum(1 for at in self.estimated.values() if at is None),
            "sampled_every": self.every,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
