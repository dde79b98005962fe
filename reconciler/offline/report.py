"""``replay --profile``: the policy's effect, told apart from the what-if model's error.

A what-if run simulates what depended on our own decisions (``reconciler.offline.whatif``), so
comparing it with the log mixes two things: what the other policy changed, and what the model
gets wrong. Two runs on the same model tell them apart:

- the **baseline**: the recorded policy on the what-if model; **profile**: the same model under P.
  Their difference is the policy's effect alone; with P equal to the recorded policy it is zero.
- the **model error**: the log (what really happened) against the baseline, shown apart and
  labelled as such, so a user can judge how far to trust the model at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from eventlog import codec
from eventlog import events as ev
from reconciler import core
from reconciler.edge.logsource import format_ms
from reconciler.edge.plugins import PluginSet
from reconciler.offline.outcomes import (
    WAIT_TOLERANCE_S,
    Outcomes,
    change,
    differences,
    placements_per_cluster,
)
from reconciler.offline.policydoc import on_recorded
from reconciler.offline.whatif import Observed, WhatIf, baseline_policy

MAX_ROWS = 50  # per-job rows printed per section; --json has them all


def figures(outcomes: Outcomes) -> dict[str, Any]:
    return {**outcomes.summary(), "placements_per_cluster": placements_per_cluster(outcomes)}


@dataclass
class Comparison:
    profile: str
    seen: Observed
    policy: ev.PolicyLoaded | None  # the profile's run, as it ran (None: the recorded policy)
    baseline: WhatIf
    whatif: WhatIf
    single_profile: bool = False  # the file was one profile, tried on the recorded policy
    queues: str | None = None  # replay --queues: the file its run used in place of the log's

    @property
    def baseline_label(self) -> str:
        changes = self.seen.policy_changes()
        if changes:
            return f"the recorded policies, with their {changes} change(s) at the recorded times"
        return "the recorded policy" if self.seen.policy is not None else "the built-in default (no policy recorded)"

    def as_json(self) -> dict[str, Any]:
        recorded, base, other = figures(self.seen.recorded), figures(self.baseline.outcomes), figures(self.whatif.outcomes)
        return {
            "profile": self.profile,
            "queues": self.queues,
            "baseline_policy": self.baseline_label,
            "profile_on_recorded_policy": self.single_profile,
            "baseline": base,
            "whatif": other,
            "policy_effect": {
                "figures": change(base, other),
                "changed": differences(self.baseline.outcomes, self.whatif.outcomes, wait_tolerance_s=0),
            },
            "model_error": {
                "recorded": recorded,
                "figures": change(recorded, base),
                "changed": differences(self.seen.recorded, self.baseline.outcomes),
                "wait_tolerance_s": WAIT_TOLERANCE_S,
            },
            "state": codec.to_builtins(core.summary(self.whatif.state)),
        }


def compare(
    seen: Observed,
    policy: ev.PolicyLoaded | None,
    *,
    profile: str,
    plugins: PluginSet,
    single_profile: bool = False,
    queues: ev.QueuesConfigured | None = None,
) -> Comparison:
    """``single_profile``: ``policy`` is one profile's file, to try on the recorded policy (its other
    profiles, timeouts and priority classes), not on the config's defaults for them. ``policy``
    None: the recorded policy in both runs (``replay --queues`` alone). ``queues``: the queue
    configuration of the other run, in place of the log's (``source`` names its file)."""
    tried_on_recorded = single_profile and seen.policy is not None
    if tried_on_recorded and policy is not None and seen.policy is not None:
        policy = on_recorded(policy, seen.policy)
    baseline = WhatIf(seen, baseline_policy(seen), plugins=plugins)
    baseline.run()
    whatif = WhatIf(seen, policy if policy is not None else baseline_policy(seen), plugins=plugins, queues=queues)
    whatif.run()
    return Comparison(
        profile,
        seen,
        policy,
        baseline,
        whatif,
        single_profile=tried_on_recorded,
        queues=queues.source if queues is not None else None,
    )


# ---------------------------------------------------------------------------------------------
# Text
# ---------------------------------------------------------------------------------------------


def print_comparison(c: Comparison, out: TextIO) -> None:
    doc = c.as_json()
    seen = c.seen
    span = f"{format_ms(seen.inputs[0].at_ms)} .. {format_ms(seen.end_ms)}" if seen.inputs else "empty log"
    out.write(f"what if {c.profile} had been in force ({len(seen.inputs)} outside inputs, {span})\n\n")

    if c.queues is not None:
        out.write(f"queues: {c.queues} in place of the log's queue configuration ({len(seen.queues)} recorded)\n\n")
    if c.single_profile and c.policy is not None:
        names = ", ".join(p.name for p in c.policy.profiles)
        out.write(
            f"{c.profile} is one profile: tried on the recorded policy, whose timeouts, priority classes\n"
            f"and other profiles stay as they were (profiles now: {names})\n\n"
        )
    out.write(
        f"POLICY EFFECT: {c.baseline_label} and {c.profile}, both run on the same what-if model\n"
        "(simulated workers where the log's facts stop applying); their difference is the policy's alone.\n\n"
    )
    effect = doc["policy_effect"]
    name = Path(c.profile).name
    column = name if len(name) <= 15 else name[:14] + "…"
    _table(out, ("recorded policy", column, "policy effect"), doc["baseline"], doc["whatif"], effect["figures"])
    rows = effect["changed"]
    if not rows and not _any_change(effect["figures"]):
        out.write("\n  no policy effect: every job and every figure comes out the same\n")
    else:
        moved = sum(1 for d in rows if d["cluster"][0] != d["cluster"][1])
        out.write(f"\n  {len(rows)} jobs with a different outcome under {c.profile}, {moved} placed elsewhere\n")
        _rows(out, rows, limit=MAX_ROWS)

    error = doc["model_error"]
    out.write(
        "\nMODEL ERROR (not part of the policy effect): what really happened (the log) against the\n"
        f"what-if model running {c.baseline_label}.\n\n"
    )
    _table(out, ("the log", "what-if model", "model error"), error["recorded"], doc["baseline"], error["figures"])
    rows = error["changed"]
    out.write(
        f"\n  {len(rows)} jobs come out differently in the model than they really did "
        f"(waits within {WAIT_TOLERANCE_S} s count as the same)\n"
    )
    _rows(out, rows, limit=10)


def _table(out: TextIO, heads: tuple[str, str, str], a: dict[str, Any], b: dict[str, Any], d: dict[str, Any]) -> None:
    out.write(f"  {'':<28}{heads[0]:>16}{heads[1]:>16}{heads[2]:>16}\n")
    for name in a:
        if name == "placements_per_cluster":
            continue
        out.write(f"  {name:<28}{_fmt(a[name]):>16}{_fmt(b[name]):>16}{_signed(d[name]):>16}\n")
    pa, pb, pd = a["placements_per_cluster"], b["placements_per_cluster"], d["placements_per_cluster"]
    for cluster in sorted(set(pa) | set(pb)):
        label = f"placed on {cluster}"
        out.write(f"  {label:<28}{pa.get(cluster, 0):>16}{pb.get(cluster, 0):>16}{_signed(pd.get(cluster, 0)):>16}\n")


def _rows(out: TextIO, rows: list[dict[str, Any]], *, limit: int) -> None:
    for d in rows[:limit]:
        a, b = d["cluster"]
        wa, wb = d["wait_s"]
        out.write(
            f"    {d['job']:<32} cluster {a or '-'} -> {b or '-'}   wait {_secs(wa)} -> {_secs(wb)}"
            f"   copies {d['copies'][0]} -> {d['copies'][1]}"
            + (f"   evictions {d['evictions'][0]} -> {d['evictions'][1]}" if d["evictions"][0] != d["evictions"][1] else "")
            + "\n"
        )
    if len(rows) > limit:
        out.write(f"    … {len(rows) - limit} more (use --json for all)\n")


def _any_change(figures: dict[str, Any]) -> bool:
    return any(_any_change(v) if isinstance(v, dict) else v != 0 for v in figures.values())


def _secs(value: float | None) -> str:
    return "-" if value is None else f"{value}s"


def _fmt(value: Any) -> str:
    return "-" if value is None else str(value)


def _signed(value: Any) -> str:
    if value is None:
        return "-"
    return "0" if value == 0 else f"{value:+}"
