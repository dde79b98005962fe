"""The shipped profile files decode through the config schema and are valid policies."""

from __future__ import annotations

from eventlog import codec
from eventlog import events as ev
from reconciler import profiles
from reconciler.core import DEFAULT_PROFILE, validate_policy
from tests.reconciler.core.harness import Harness, cluster, job, of_type


def test_default_yaml_is_the_built_in_default() -> None:
    [default] = profiles.load("default")
    assert codec.encode(default) == codec.encode(DEFAULT_PROFILE)


def test_example_profiles_are_valid_and_dispatch() -> None:
    examples = profiles.load("examples")
    assert validate_policy(ev.PolicyLoaded(profiles=examples)) == []
    h = Harness(policy=ev.PolicyLoaded(profiles=examples))
    h.inputs(*(cluster(f"c{i}", cpu=16_000 * (i + 1)) for i in range(4)))
    [a] = of_type(h.feed(job("a", placement=ev.Placement(profile="all-at-once"))), ev.Nominated)
    [b] = of_type(h.feed(job("b", placement=ev.Placement(profile="incremental-3"))), ev.Nominated)
    [c] = of_type(h.feed(job("c", placement=ev.Placement(profile="pack-near"))), ev.Nominated)
    assert len(a.clusters) == 4 and len(b.clusters) == 3 and c.clusters == ["c0"]
