"""The fair-share tournament compares nodes by ``order_key`` (floats first, exact fractions on a
tie) instead of the exact ``ShareKey``: the two must order any shares the same way; and the
tournament, with its cached and interned keys, must pick what a plain ``min`` over exact shares
picks."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from eventlog import events as ev
from reconciler.core.queues.order import ShareKey, Tournament, order_key
from reconciler.core.queues.tree import compile_queues
from reconciler.core.queues.usage import Usage

# Shares as the tournament makes them: usage / capacity * 1000 / weight, often equal or nearly so.
fractions = st.one_of(
    st.builds(Fraction, st.integers(0, 10**12), st.integers(1, 10**12)),
    st.builds(
        lambda n, d, w: Fraction(n, d) * 1000 / w,
        st.integers(0, 50),
        st.integers(1, 50),
        st.integers(1, 4000),
    ),
    st.builds(lambda n: Fraction(10**17 + n, 10**17), st.integers(0, 3)),  # equal as floats
)
keys = st.tuples(st.booleans(), fractions, st.sampled_from(["a", "b", "team-001"]))


@given(st.lists(keys, min_size=2, max_size=12))
def test_order_key_sorts_like_the_exact_share(shares: list[ShareKey]) -> None:
    exact = sorted(range(len(shares)), key=lambda i: (shares[i], i))
    fast = sorted(range(len(shares)), key=lambda i: (order_key(shares[i]), i))
    assert fast == exact
    assert min(shares) == shares[min(range(len(shares)), key=lambda i: (order_key(shares[i]), i))]


# ---- the tournament itself, against the plain min over exact keys ------------------------------


def _exact_weighted(usage: Usage, node: int, fleet: dict[str, int]) -> ShareKey:
    """The share as first written: one Fraction per resource, the max, then the weight."""
    n = usage.tree.nodes[node]
    raw = Fraction(0)
    for resource, used in sorted(usage.by_resource(node).items()):
        cap = fleet.get(resource, 0)
        if cap > 0 and used > 0:
            raw = max(raw, Fraction(used, cap))
    return (True, raw, n.name) if n.weight_milli <= 0 else (False, raw * 1000 / n.weight_milli, n.name)


def _queue(name: str, cohort: str | None, weight_milli: int) -> ev.ClusterQueueSpec:
    return ev.ClusterQueueSpec(
        name=name,
        cohort=cohort,
        namespace_selector=ev.LabelSelector(),
        resource_groups=[
            ev.ResourceGroup(
                covered_resources=["cpu", "gpu"],
                flavors=[
                    ev.FlavorQuotas(
                        name="default",
                        resources=[
                            ev.ResourceQuota(name="cpu", nominal=64),
                            ev.ResourceQuota(name="gpu", nominal=8),
                        ],
                    )
                ],
            )
        ],
        weight_milli=weight_milli,
    )


# (cohort or None, weight) per queue; usage steps (queue, cpu, gpu), applied between picks.
worlds = st.tuples(
    st.lists(
        st.tuples(st.sampled_from([None, "c1", "c2"]), st.sampled_from([0, 500, 1000, 1000, 3000])),
        min_size=1,
        max_size=8,
    ),
    st.lists(st.tuples(st.integers(0, 7), st.integers(0, 6), st.integers(0, 3)), max_size=30),
    st.tuples(st.integers(0, 200), st.integers(0, 24)),
)


@given(worlds)
def test_the_tournament_picks_as_a_min_over_exact_shares(world: tuple[Any, Any, Any]) -> None:
    queues, steps, (cpu, gpu) = world
    config = ev.QueuesConfigured(
        cluster_queues=[_queue(f"q{i}", cohort, w) for i, (cohort, w) in enumerate(queues)], source="test"
    )
    tree = compile_queues(config)
    assert tree is not None
    usage = Usage(tree)
    fleet = {"cpu": cpu, "gpu": gpu}
    active = sorted(tree.queue.values())
    tour = Tournament(usage, fleet, active)
    count = list(tour.count)
    for q, cpu_used, gpu_used in [*steps, *[(0, 0, 0)] * len(active)]:
        level = [r for r in tree.roots if count[r]]
        expected = None
        while level:
            best = min(level, key=lambda n: _exact_weighted(usage, n, fleet))
            if tree.nodes[best].is_queue:
                expected = best
                break
            level = [c for c in tree.nodes[best].children if count[c]]
        assert tour.pick() == expected
        if expected is None:
            break
        node = active[q % len(active)]
        usage.add(node, tree.column[("default", "cpu")], cpu_used)
        usage.add(node, tree.column[("default", "gpu")], gpu_used)
        if cpu_used == 0 and gpu_used == 0:  # a step with nothing charged: the picked queue is done
            tour.retire(expected)
            for a in tree.ancestors(expected):
                count[a] -= 1
