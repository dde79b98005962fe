"""Outcome codes, as in kube-scheduler: precise values instead of ad-hoc booleans."""

from __future__ import annotations

import enum

from msgspec import Struct


class Code(enum.IntEnum):
    SUCCESS = 0
    # Fails now but could pass if something on the cluster changed (e.g. jobs left): preemption
    # may help.
    UNSCHEDULABLE = 1
    # Fails whatever happens to the jobs running there (labels, taints, total capacity).
    UNSCHEDULABLE_AND_UNRESOLVABLE = 2
    # The plugin has nothing to say about this job (e.g. no selector): every cluster passes.
    SKIP = 3
    # The plugin could not decide (bad arguments at run time): the cluster is not used.
    ERROR = 4


class Reason(Struct, frozen=True):
    """Why a filter rejected clusters; ``message`` is what a person reads in summaries."""

    code: Code
    message: str


def is_rejection(code: Code) -> bool:
    return code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.ERROR)
