"""Pure core: ``state = fold(state, event)`` and ``decisions = decide(state)``.

Contract: no I/O, no clock, no randomness, no iteration order that depends on hash seeds. Time is
the ``at_ms`` of the log entry being folded. Enforced by import-linter (see pyproject.toml).

The API other areas code against:
- ``new_state(policy_override=None)``, ``fold(state, entry)``, ``decide(state)``,
  ``next_deadline(state)``, ``explain(state, job_key)``, ``summary(state)``,
  ``dump_state(state)`` / ``load_state(raw)``, ``validate_policy(policy)``.
"""

from __future__ import annotations

from eventlog.events import PolicyLoaded
from reconciler.core import phases
from reconciler.core.decide import decide
from reconciler.core.explain import (
    ClusterVerdict,
    JobExplanation,
    PluginScore,
    Rejection,
    UnknownJob,
    explain,
)
from reconciler.core.fold import fold
from reconciler.core.framework.profile import DEFAULT_PROFILE, validate_policy
from reconciler.core.framework.registry import REGISTRY, PluginError
from reconciler.core.snapshot import SnapshotError, dump_state, load_state
from reconciler.core.state import State
from reconciler.core.summary import summary
from reconciler.core.timers import next_deadline


def new_state(*, policy_override: PolicyLoaded | None = None) -> State:
    """An empty state. With an override, PolicyLoaded entries in the log are ignored."""
    state = State(policy_override=policy_override)
    state.install_policy()
    return state


__all__ = [
    "DEFAULT_PROFILE",
    "REGISTRY",
    "ClusterVerdict",
    "JobExplanation",
    "PluginError",
    "PluginScore",
    "Rejection",
    "SnapshotError",
    "State",
    "UnknownJob",
    "decide",
    "dump_state",
    "explain",
    "fold",
    "load_state",
    "new_state",
    "next_deadline",
    "phases",
    "summary",
    "validate_policy",
]
