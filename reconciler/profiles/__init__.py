"""Profiles shipped with kdispatch, as policy YAML (``default.yaml``, ``examples.yaml``).

``load(name)`` reads one through the same schema as the config file's ``policy:`` section, so
what ships is exactly what a user could write.
"""

from __future__ import annotations

from importlib import resources

import yaml

from eventlog import events as ev
from reconciler.config import PolicyConfig, decode
from reconciler.policy import profile_event

SHIPPED = ("default", "examples")


def load(name: str) -> list[ev.Profile]:
    """The profiles of ``<name>.yaml`` as recorded in ``PolicyLoaded``."""
    if name not in SHIPPED:
        raise ValueError(f"no shipped profile file {name!r} (have: {', '.join(SHIPPED)})")
    raw = yaml.safe_load(resources.files(__package__).joinpath(f"{name}.yaml").read_text())
    policy = decode(raw, PolicyConfig, source=f"{name}.yaml")
    return [profile_event(p) for p in policy.profiles]
