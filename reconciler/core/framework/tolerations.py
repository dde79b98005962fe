"""Taint/toleration matching, Kubernetes rules, evaluated per distinct taint (not per cluster)."""

from __future__ import annotations

from eventlog.events import Taint, Toleration
from eventlog.kube.names import DRAINING_TAINT


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    if taint.key == DRAINING_TAINT:
        return False  # kdispatch's own drain: not even "tolerate everything" keeps a job there
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.operator == "Exists":
        return not toleration.key or toleration.key == taint.key
    return toleration.key == taint.key and toleration.value == taint.value


def tolerated(tolerations: list[Toleration], taint: Taint, *, for_new_placement: bool) -> bool:
    """Whether the job tolerates the taint.

    For a new placement, a NoExecute toleration with ``tolerationSeconds`` does not count: the
    cluster would evict the job on a timer, so dispatching there only makes churn.
    """
    for t in tolerations:
        if not tolerates(t, taint):
            continue
        if for_new_placement and taint.effect == "NoExecute" and t.toleration_seconds is not None:
            continue
        return True
    return False


def eviction_delay_ms(tolerations: list[Toleration], taint: Taint) -> int | None:
    """For a NoExecute taint on a running job's cluster: None = tolerated forever, else ms to wait."""
    best: int | None = 0
    for t in tolerations:
        if not tolerates(t, taint):
            continue
        if t.toleration_seconds is None:
            return None
        best = max(best or 0, max(t.toleration_seconds, 0) * 1000)
    return best
