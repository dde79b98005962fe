"""The configured policy as the event the leader records (``PolicyLoaded``).

Reads the ``policy:`` section of the config file (``reconciler.config.PolicyConfig``), and for
``replay --profile FILE`` also a bare policy document or a single profile, so a person can try
"what if this profile had been in force" without writing a whole config file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from eventlog import codec
from eventlog import events as ev
from reconciler.config import (
    ConfigError,
    PolicyConfig,
    ProfileConfig,
    decode,
    decode_config,
    line_of,
    read_yaml,
)


def policy_event(policy: PolicyConfig) -> ev.PolicyLoaded:
    return ev.PolicyLoaded(
        profiles=[profile_event(p) for p in policy.profiles],
        priority_classes=dict(sorted(policy.priority_classes.items())),
        worker_lost_timeout_ms=policy.worker_lost_timeout_ms,
        claim_ttl_ms=policy.claim_ttl_ms,
        requeue_backoff_ms=policy.requeue_backoff_ms,
    )


def profile_event(p: ProfileConfig) -> ev.Profile:
    """A configured profile as ``PolicyLoaded`` records it: plugin names become specs."""
    return ev.Profile(
        name=p.name,
        filters=[ev.FilterSpec(name=f) if isinstance(f, str) else f for f in p.filters],
        scores=[ev.ScoreSpec(name=s) if isinstance(s, str) else s for s in p.scores],
        strategy=p.strategy,
        round_timeout_ms=p.round_timeout_ms,
        dispatch_mode=p.dispatch_mode,
    )


def same_policy(a: ev.PolicyLoaded | None, b: ev.PolicyLoaded | None) -> bool:
    if a is None or b is None:
        return a is b
    return codec.encode(a) == codec.encode(b)


def same_queues(a: ev.QueuesConfigured | None, b: ev.QueuesConfigured | None) -> bool:
    """The same queue configuration, wherever it was read from (``source`` aside): serving the same
    objects from another path, or from the manager cluster instead of a file, records nothing new."""
    if a is None or b is None:
        return a is b
    return codec.encode(msgspec.structs.replace(a, source="")) == codec.encode(msgspec.structs.replace(b, source=""))


POLICY_FILE = (
    "a profile (name:, filters:, scores:, strategy:, ...), a policy (profiles: [...], "
    "priorityClasses:, ...) or a config file with policy:"
)


def _yaml_kind(raw: Any) -> str:
    return "list" if isinstance(raw, list) else f"single value ({raw!r})"


def load_policy_file(path: str | Path) -> ev.PolicyLoaded:
    """A config file (with ``policy:``), a policy document (with ``profiles:``) or one profile.

    Validated by the config file's own rules (``reconciler.config.decode_config``: unknown fields
    refused with a hint, durations checked, field paths), so a file that would stop ``serve`` at
    start-up is refused here too, with the path in the file as given.

    A single profile is installed under its own name and as ``default`` too, so jobs that asked
    for no particular profile run under it (that is what "replay under this profile" means).
    """
    source = str(path)
    raw, text = read_yaml(path, expected=POLICY_FILE)
    if not isinstance(raw, dict):
        raise ConfigError(f"expected {POLICY_FILE}; found a {_yaml_kind(raw)}", source=source, line=line_of(text, "$"))
    if "policy" in raw:  # a whole config file: validated whole, as serve would
        return policy_event(decode_config(raw, source=source, text=text).policy)
    if "profiles" not in raw and "name" in raw:
        profile = decode(raw, ProfileConfig, source=source, text=text)
        event = policy_event(PolicyConfig(profiles=[profile]))
        first = event.profiles[0]
        if first.name != "default":
            event = msgspec.structs.replace(event, profiles=[first, msgspec.structs.replace(first, name="default")])
        return event
    return policy_event(decode(raw, PolicyConfig, source=source, text=text))
