"""When will a pending job start? The core run forward from a state in virtual time, running jobs
ending at their expected end (``durations``: what the log says a job will take), simulated
workers (``reconciler.simworker``) admitting as the real ones would (``estimate``).

Shared by ``kdispatch queue``, the reconciler's API, page and status annotation, and
``kdispatch simulate`` (which measures how far off the estimates were)."""

from reconciler.forecast.durations import DEFAULT_RUNTIME_MS, DurationLearner, Durations, expected_runtime_ms
from reconciler.forecast.estimate import (
    DEFAULT_LIMIT,
    Estimate,
    Forecast,
    approx,
    estimate_starts,
    expected_cell,
    expected_line,
)

__all__ = [
    "DEFAULT_LIMIT",
    "DEFAULT_RUNTIME_MS",
    "DurationLearner",
    "Durations",
    "Estimate",
    "Forecast",
    "approx",
    "estimate_starts",
    "expected_cell",
    "expected_line",
    "expected_runtime_ms",
]
