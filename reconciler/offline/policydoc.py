"""A recorded policy (``PolicyLoaded``) written back as the policy document ``--profile`` reads.

``kdispatch replay --show-policy`` prints it, so a user can start a what-if from the policy that
was really in force and change one thing. Reading the document back (``reconciler.policy``) gives
the same policy, plugin provenance aside (the core ignores it): ``tests`` check the round trip.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import yaml

from eventlog import events as ev


def _duration(ms: int) -> str:
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _profile(p: ev.Profile) -> dict[str, Any]:
    # Plugin specs and the strategy keep the log's own (snake case) keys, as the config takes them;
    # a spec with nothing but a name is written as the bare name, as a person would.
    doc: dict[str, Any] = {"name": p.name}
    doc["filters"] = [f.name if not f.args else msgspec.to_builtins(f) for f in p.filters]
    doc["scores"] = [s.name if s.weight == 1 and not s.args else msgspec.to_builtins(s) for s in p.scores]
    strategy = p.strategy
    doc["strategy"] = {"type": strategy.type}
    if strategy.type == "TopK":  # the knob a person would turn next, spelt out though a default
        doc["strategy"]["k"] = strategy.k
    elif strategy.type == "Incremental":
        doc["strategy"]["step_size"] = strategy.step_size
    # Spelt out: absent in a log means "all" (what logs from before the field did), while a
    # profile file without it would get the config's default for the strategy.
    doc["strategy"]["nominated_hold"] = strategy.nominated_hold or "all"
    doc["roundTimeout"] = _duration(p.round_timeout_ms)
    doc["dispatchMode"] = p.dispatch_mode
    return doc


def policy_document(policy: ev.PolicyLoaded, *, header: str = "") -> str:
    doc: dict[str, Any] = {
        "workerLostTimeout": _duration(policy.worker_lost_timeout_ms),
        "claimTtl": _duration(policy.claim_ttl_ms),
        "requeueBackoff": _duration(policy.requeue_backoff_ms),
        "priorityClasses": dict(policy.priority_classes),
        "profiles": [_profile(p) for p in policy.profiles],
    }
    comment = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    return comment + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)


def is_single_profile(path: str | Path) -> bool:
    """Whether a ``--profile`` file is one profile (``name:`` …) rather than a policy or config.

    Read after ``reconciler.policy.load_policy_file`` accepted the file, with the same rule."""
    raw: Any = yaml.safe_load(Path(path).read_text()) or {}
    return isinstance(raw, dict) and "policy" not in raw and "profiles" not in raw and "name" in raw


def on_recorded(single: ev.PolicyLoaded, recorded: ev.PolicyLoaded) -> ev.PolicyLoaded:
    """A single profile tried on the recorded policy: it replaces the profile of its name and
    ``default``; the rest (timeouts, priority classes, other profiles) stays as recorded, so the
    what-if changes the one thing the file names and not, say, ``workerLostTimeout`` 4 s -> 60 s."""
    mine = {p.name for p in single.profiles}
    kept = [p for p in recorded.profiles if p.name not in mine]
    return msgspec.structs.replace(recorded, profiles=[*single.profiles, *kept], plugins=None)


def effective(policy: ev.PolicyLoaded) -> ev.PolicyLoaded:
    """``policy`` with what an absent field means written out (``nominated_hold``: "all"), so a
    recorded policy and its document read back compare equal."""
    profiles = [
        msgspec.structs.replace(
            p, strategy=msgspec.structs.replace(p.strategy, nominated_hold=p.strategy.nominated_hold or "all")
        )
        for p in policy.profiles
    ]
    return msgspec.structs.replace(policy, profiles=profiles)
