"""The configured policy as the event the leader records (``PolicyLoaded``).

Reads the ``policy:`` section of the config file (``reconciler.config.PolicyConfig``), and for
``replay --profile FILE`` also a bare policy document or a single profile, so a person can try
"what if this profile had been in force" without writing a whole config file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import yaml

from eventlog import codec
from eventlog import events as ev
from reconciler.config import ConfigError, PolicyConfig, ProfileConfig, parse_duration_ms


def policy_event(policy: PolicyConfig) -> ev.PolicyLoaded:
    return ev.PolicyLoaded(
        profiles=[_profile(p, path=f"$.policy.profiles[{i}]") for i, p in enumerate(policy.profiles)],
        priority_classes=dict(sorted(policy.priority_classes.items())),
        worker_lost_timeout_ms=parse_duration_ms(policy.worker_lost_timeout, path="$.policy.workerLostTimeout"),
        claim_ttl_ms=parse_duration_ms(policy.claim_ttl, path="$.policy.claimTtl"),
        requeue_backoff_ms=parse_duration_ms(policy.requeue_backoff, path="$.policy.requeueBackoff"),
    )


def _profile(p: ProfileConfig, *, path: str) -> ev.Profile:
    return ev.Profile(
        name=p.name,
        filters=[ev.FilterSpec(name=f) if isinstance(f, str) else f for f in p.filters],
        scores=[ev.ScoreSpec(name=s) if isinstance(s, str) else s for s in p.scores],
        strategy=p.strategy,
        round_timeout_ms=parse_duration_ms(p.round_timeout, path=f"{path}.roundTimeout"),
        dispatch_mode=p.dispatch_mode,
    )


def same_policy(a: ev.PolicyLoaded | None, b: ev.PolicyLoaded | None) -> bool:
    if a is None or b is None:
        return a is b
    return codec.encode(a) == codec.encode(b)


def load_policy_file(path: str | Path) -> ev.PolicyLoaded:
    """A config file (with ``policy:``), a policy document (with ``profiles:``) or one profile.

    A single profile is installed under its own name and as ``default`` too, so jobs that asked
    for no particular profile run under it (that is what "replay under this profile" means).
    """
    source = str(path)
    try:
        raw: Any = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(str(err), source=source) from None
    if not isinstance(raw, dict):
        raise ConfigError("expected a mapping (a config file, a policy or a profile)", source=source)
    if "policy" in raw:
        raw = raw["policy"]
    if "profiles" not in raw and "name" in raw:
        profile = _convert(raw, ProfileConfig, source=source)
        event = policy_event(PolicyConfig(profiles=[profile]))
        first = event.profiles[0]
        if first.name != "default":
            event = msgspec.structs.replace(event, profiles=[first, msgspec.structs.replace(first, name="default")])
        return event
    return policy_event(_convert(raw, PolicyConfig, source=source))


def _convert(raw: Any, kind: type[Any], *, source: str) -> Any:
    try:
        return msgspec.convert(raw, kind)
    except msgspec.ValidationError as err:
        text = str(err)
        where = text.rsplit(" - at `", 1)[1].rstrip("`") if " - at `" in text else "$"
        raise ConfigError(text.split(" - at `")[0], path=where, source=source) from None
