"""The profiles a simulation compares: a MultiKueue baseline and kdispatch's four strategies, or
the ones from ``--profile`` files.

All five are the core's built-in ``default`` profile (its filters, including ``ClusterHeadroom``,
and its weighted scores, including ``CapacityScore``) with only the strategy changed, so the
comparison isolates the strategy:

- ``multikueue``, the baseline: ``AllAtOnce`` whose copies hold nothing until one is admitted
  (``nominated_hold: none``): MultiKueue's copies wait in every worker's queue without holding
  quota there, and the first admitted wins;
- kdispatch's ``AllAtOnce`` (every cluster that passes the filters), ``Incremental`` (3 more per
  round), ``TopK`` with k = 1 and 2, each holding what a configured profile holds by default
  (``reconciler.config.default_nominated_hold``: nothing for AllAtOnce, which makes it the
  baseline's twin; every nominated cluster for the others).
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from eventlog import events as ev
from reconciler.config import default_nominated_hold, read_yaml
from reconciler.core.framework.profile import DEFAULT_PROFILE
from reconciler.policy import POLICY_FILE, load_policy_file

BASELINE = "multikueue"

# How tables and plots name a profile, where the name alone would not say what it stands for.
LABELS = {BASELINE: "MultiKueue (baseline)"}


def label(name: str) -> str:
    """``NAME@MODEL`` (one profile under one capacity model of ``--capacity-model both``) keeps
    the model visible."""
    base, _, model = name.partition("@")
    return LABELS.get(base, base) + (f" @{model}" if model else "")


def _profile(name: str, strategy: ev.StrategySpec) -> ev.Profile:
    """The built-in profile with this strategy, holding what a configured profile would hold."""
    if strategy.nominated_hold is None:
        strategy = msgspec.structs.replace(strategy, nominated_hold=default_nominated_hold(strategy.type))
    return msgspec.structs.replace(DEFAULT_PROFILE, name=name, strategy=strategy)


def default_profiles() -> list[ev.Profile]:
    return [
        _profile(BASELINE, ev.StrategySpec(type="AllAtOnce", nominated_hold="none")),
        _profile("all-at-once", ev.StrategySpec(type="AllAtOnce")),
        _profile("incremental-3", ev.StrategySpec(type="Incremental", step_size=3)),
        _profile("topk-1", ev.StrategySpec(type="TopK", k=1)),
        _profile("topk-2", ev.StrategySpec(type="TopK", k=2)),
    ]


class PolicyDefaults(msgspec.Struct, frozen=True, kw_only=True):
    """Policy settings around the profile (from the profile file when it sets them).

    No faults are simulated, so the worker-lost timeout only sets how often idle workers report
    (twice per timeout): 30 virtual minutes keeps a 149-day trace to a few thousand idle batches.
    """

    worker_lost_timeout_ms: int = 1_800_000
    claim_ttl_ms: int = 120_000
    requeue_backoff_ms: int = 10_000


def load_profiles(paths: list[Path]) -> list[tuple[ev.Profile, PolicyDefaults]]:
    """Every profile of every file (a config file, a policy or a single profile), in order.

    The ``default`` alias that a single-profile file gets is dropped: it is the same profile.
    """
    out: list[tuple[ev.Profile, PolicyDefaults]] = []
    for path in paths:
        policy = load_policy_file(path)
        settings = PolicyDefaults(
            worker_lost_timeout_ms=policy.worker_lost_timeout_ms
            if _sets(path, "workerLostTimeout")
            else PolicyDefaults().worker_lost_timeout_ms,
            claim_ttl_ms=policy.claim_ttl_ms,
            requeue_backoff_ms=policy.requeue_backoff_ms,
        )
        named = [p for p in policy.profiles if p.name != "default"] or list(policy.profiles)
        out.extend((p, settings) for p in named)
    names = [p.name for p, _ in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"profile names must be unique across --profile files; repeated: {dup}")
    return out


def _sets(path: Path, key: str) -> bool:
    """Whether the file itself sets a policy key (else the simulation's default applies)."""
    raw, _ = read_yaml(path, expected=POLICY_FILE)  # read before by load_policy_file: no surprise here
    if isinstance(raw, dict) and isinstance(raw.get("policy"), dict):
        raw = raw["policy"]
    return isinstance(raw, dict) and key in raw


def policy_for(profile: ev.Profile, *, settings: PolicyDefaults, priority_classes: dict[str, int]) -> ev.PolicyLoaded:
    """The ``PolicyLoaded`` of one run: this profile, also as ``default``."""
    return ev.PolicyLoaded(
        profiles=[profile] if profile.name == "default" else [profile, msgspec.structs.replace(profile, name="default")],
        priority_classes=dict(sorted(priority_classes.items())),
        worker_lost_timeout_ms=settings.worker_lost_timeout_ms,
        claim_ttl_ms=settings.claim_ttl_ms,
        requeue_backoff_ms=settings.requeue_backoff_ms,
    )
