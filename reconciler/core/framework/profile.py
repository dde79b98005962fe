"""Profiles: the ``Profile`` events of the policy, compiled into plugin instances.

Profiles are compiled against the plugin registry the caller hands in: the framework knows no
plugin by itself, not even the built-in ones. Compilation validates everything (plugin names,
kinds, arguments, weights, strategy) and reports problems with a field path, so the shell can
refuse a bad policy before recording it. A profile that is somehow invalid in the log does not
crash the core: its jobs are reported unschedulable with the error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from eventlog.events import FilterSpec, PolicyLoaded, Profile, ScoreSpec, StrategySpec
from reconciler.core.framework.interface import FilterPlugin, FilterResult, ScorePlugin
from reconciler.core.framework.registry import PluginError, Registry

HEALTH = "ClusterHealth"

DEFAULT_PROFILE = Profile(
    name="default",
    filters=[
        FilterSpec(name=HEALTH),
        FilterSpec(name="ClusterPinning"),
        FilterSpec(name="ClusterSelector"),
        FilterSpec(name="ClusterAffinity"),
        FilterSpec(name="ClusterTaints"),
        FilterSpec(name="ClusterFeasibility"),
        FilterSpec(name="ClusterHeadroom"),
        # Capacity as the worker reports it (nodes, its Kueue queues); a worker that reported
        # none passes, so logs recorded before these facts existed decide as they did.
        FilterSpec(name="WorkerQueueFit"),
        FilterSpec(name="NodeFit"),
        FilterSpec(name="TopologyFit"),
    ],
    scores=[
        ScoreSpec(name="ClusterAffinityScore", weight=2),
        ScoreSpec(name="ClusterTaintScore", weight=1),
        ScoreSpec(name="CapacityScore", weight=1),
        ScoreSpec(name="TopologyScore", weight=1),
        ScoreSpec(name="GangScore", weight=1),
    ],
    strategy=StrategySpec(type="TopK", k=1, nominated_hold="all"),
    round_timeout_ms=60_000,
    dispatch_mode="MustBeAdmitted",
)


@dataclass
class CompiledProfile:
    spec: Profile
    filters: list[tuple[str, FilterPlugin]]
    scores: list[tuple[str, int, ScorePlugin]]
    # Static filter verdicts per (job spec key, filter index), valid for one cluster-table version.
    cache: dict[tuple[bytes, int], FilterResult] = field(default_factory=dict)
    # Per job spec key: which clusters pass every static filter (bool mask over the table).
    static_ok: dict[bytes, Any] = field(default_factory=dict)
    # Per (filter index, the filter's cache_key): which clusters pass that static filter alone.
    parts: dict[tuple[int, Any], Any] = field(default_factory=dict)
    # Per (score index, the score plugin's cache_key): raw scores over the table.
    score_parts: dict[tuple[int, Any], Any] = field(default_factory=dict)
    cache_version: int = -1
    # The dynamic filters that are not idle, for one (table version, facts version).
    active: tuple[tuple[int, int], list[tuple[str, FilterPlugin]]] | None = None
    # The indexes of idle score plugins, for one (table version, facts version).
    idle_scores: tuple[tuple[int, int], frozenset[int]] | None = None

    @property
    def name(self) -> str:
        return self.spec.name


def compile_profile(profile: Profile, registry: Registry, *, path: str = "profile") -> CompiledProfile:
    filters: list[tuple[str, FilterPlugin]] = []
    names = [f.name for f in profile.filters]
    if HEALTH not in names:  # never dispatch to a lost cluster, whatever the profile says
        filters.append((HEALTH, registry.build_filter(HEALTH, {}, path=f"{path}.filters[implicit]")))
    seen: dict[str, int] = {}
    for i, spec in enumerate(profile.filters):
        where = f"{path}.filters[{i}]"
        if spec.name in seen:
            raise PluginError(f"filter {spec.name} listed twice", path=where)
        seen[spec.name] = i
        filters.append((spec.name, registry.build_filter(spec.name, _args(spec.args), path=where)))
    scores: list[tuple[str, int, ScorePlugin]] = []
    for i, score in enumerate(profile.scores):
        where = f"{path}.scores[{i}]"
        if not 0 <= score.weight <= 100:
            raise PluginError(f"weight {score.weight} out of range 0..100", path=f"{where}.weight")
        scores.append((score.name, score.weight, registry.build_score(score.name, _args(score.args), path=where)))
    strategy = profile.strategy
    if strategy.type == "Incremental" and strategy.step_size < 1:
        raise PluginError("stepSize must be at least 1", path=f"{path}.strategy.step_size")
    if strategy.type == "TopK" and strategy.k < 1:
        raise PluginError("k must be at least 1", path=f"{path}.strategy.k")
    if profile.round_timeout_ms <= 0:
        raise PluginError("round timeout must be positive", path=f"{path}.round_timeout_ms")
    return CompiledProfile(spec=profile, filters=filters, scores=scores)


def _args(args: dict[str, Any]) -> dict[str, Any]:
    return dict(args)


def compile_policy(
    policy: PolicyLoaded | None, registry: Registry
) -> tuple[dict[str, CompiledProfile], dict[str, str]]:
    """Profiles by name (the built-in default unless the policy defines ``default``), and the
    errors of profiles that failed to compile (name -> message)."""
    compiled: dict[str, CompiledProfile] = {}
    errors: dict[str, str] = {}
    profiles = list(policy.profiles) if policy else []
    for i, profile in enumerate(profiles):
        try:
            compiled[profile.name] = compile_profile(profile, registry, path=f"$.profiles[{i}]")
        except PluginError as err:
            errors[profile.name] = str(err)
    if "default" not in compiled and "default" not in errors:
        compiled["default"] = compile_profile(DEFAULT_PROFILE, registry, path="default")
    return compiled, errors


def validate_policy(policy: PolicyLoaded, registry: Registry) -> list[str]:
    """Every problem in a policy, with field paths; empty when the policy is usable."""
    _, errors = compile_policy(policy, registry)
    return [errors[name] for name in sorted(errors)]


def plugins_used(policy: PolicyLoaded | None) -> dict[str, list[str]]:
    """The plugins a policy puts to work, by name (sorted), each with the profiles that use it:
    what ``compile_policy`` builds (the implicit health filter, the built-in default profile
    unless the policy defines one), whether or not the plugin exists."""
    profiles = list(policy.profiles) if policy else []
    if not any(p.name == "default" for p in profiles):
        profiles.append(DEFAULT_PROFILE)
    used: dict[str, list[str]] = {}
    for profile in profiles:
        names = [HEALTH, *(f.name for f in profile.filters), *(s.name for s in profile.scores)]
        for name in dict.fromkeys(names):
            used.setdefault(name, []).append(profile.name)
    return {name: used[name] for name in sorted(used)}
