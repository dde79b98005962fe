"""Pure core: ``state = fold(state, event)`` and ``decisions = decide(state)``.

Contract: no I/O, no clock, no randomness, no iteration order that depends on hash seeds. Time is
the ``at_ms`` of the log entry being folded. Enforced by import-linter (see pyproject.toml).

The API other areas code against:
- ``new_state(policy_override=None, plugins=BUILTINS)``, ``fold(state, entry)``, ``decide(state)``,
  ``next_deadline(state)``, ``explain(state, job_key)``, ``summary(state)``,
  ``dump_state(state)`` (``dump_state_into(state, out)``) / ``load_state(raw, plugins=BUILTINS)``
  (``StateLoader``: the same, fed in pieces), ``validate_policy(policy, plugins)``.

Which plugins exist is a value handed in (a ``Registry``): ``BUILTINS`` are ours; the shell adds
third-party ones it discovered (``reconciler.edge.plugins``). The core never looks them up.
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
from reconciler.core.framework import profile as _profile
from reconciler.core.framework.profile import DEFAULT_PROFILE, plugins_used
from reconciler.core.framework.registry import PluginError, Registry
from reconciler.core.plugins import BUILTINS
from reconciler.core.snapshot import SnapshotError, StateLoader, dump_state, dump_state_into, load_state
from reconciler.core.state import State
from reconciler.core.summary import summary
from reconciler.core.timers import next_deadline


def new_state(*, policy_override: PolicyLoaded | None = None, plugins: Registry = BUILTINS) -> State:
    """An empty state. With an override, PolicyLoaded entries in the log are ignored."""
    state = State(policy_override=policy_override, plugins=plugins)
    state.install_policy()
    return state


def validate_policy(policy: PolicyLoaded, plugins: Registry = BUILTINS) -> list[str]:
    """Every problem in a policy (unknown plugins among ``plugins``, bad arguments, weights,
    strategies), with field paths; empty when the policy is usable."""
    return _profile.validate_policy(policy, plugins)


__all__ = [
    "BUILTINS",
    "DEFAULT_PROFILE",
    "ClusterVerdict",
    "JobExplanation",
    "PluginError",
    "PluginScore",
    "Registry",
    "Rejection",
    "SnapshotError",
    "State",
    "StateLoader",
    "UnknownJob",
    "decide",
    "dump_state",
    "dump_state_into",
    "explain",
    "fold",
    "load_state",
    "new_state",
    "next_deadline",
    "phases",
    "plugins_used",
    "summary",
    "validate_policy",
]
