"""Profiles shipped with kdispatch, as policy YAML (``default.yaml``, ``examples.yaml``).

``load(name)`` reads one through the same schema as the config file's ``policy:`` section, so
what ships is exactly what a user could write.
"""

from __future__ import annotations

from importlib import resources

import msgspec
import yaml

from eventlog import events as ev
from reconciler.config import PolicyConfig, parse_duration_ms

SHIPPED = ("default", "examples")


def load(name: str) -> list[ev.Profile]:
    """The profiles of ``<name>.yaml`` as recorded in ``PolicyLoaded``."""
    if name not in SHIPPED:
        raise ValueError(f"no shipped profile file {name!r} (have: {', '.join(SHIPPED)})")
    raw = yaml.safe_load(resources.files(__package__).joinpath(f"{name}.yaml").read_text())
    policy = msgspec.convert(raw, PolicyConfig)
    return [
        ev.Profile(
            name=p.name,
            filters=[ev.FilterSpec(name=f) if isinstance(f, str) else f for f in p.filters],
            scores=[ev.ScoreSpec(name=s) if isinstance(s, str) else s for s in p.scores],
            strategy=p.strategy,
            round_timeout_ms=parse_duration_ms(p.round_timeout, path=f"{name}.yaml: {p.name}.roundTimeout"),
            dispatch_mode=p.dispatch_mode,
        )
        for p in policy.profiles
    ]
