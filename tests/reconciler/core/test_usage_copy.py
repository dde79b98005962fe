"""Each decide pass works on a copy of the quota usage; the copy shares rows with the state's
until either side writes one (copy-on-write). Whatever the order of writes on both sides and
of further copies, every object must read as if it had been deep-copied."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from eventlog import events as ev
from reconciler.core.queues.tree import compile_queues
from reconciler.core.queues.usage import Usage


def config() -> ev.QueuesConfigured:
    def queue(i: int) -> ev.ClusterQueueSpec:
        quotas = [
            ev.ResourceQuota(name="cpu", nominal=8 + i, borrowing_limit=4 if i % 2 else None),
            ev.ResourceQuota(name="nvidia.com/gpu", nominal=i % 3, lending_limit=1 if i == 2 else None),
        ]
        return ev.ClusterQueueSpec(
            name=f"q{i}",
            cohort=f"co{i % 2}",
            namespace_selector=ev.LabelSelector(),
            resource_groups=[
                ev.ResourceGroup(
                    covered_resources=["cpu", "nvidia.com/gpu"],
                    flavors=[ev.FlavorQuotas(name="default", resources=quotas)],
                )
            ],
        )

    return ev.QueuesConfigured(cluster_queues=[queue(i) for i in range(5)], source="test")


TREE = compile_queues(config())
QUEUES = sorted(TREE.queue.values())
# One step: on which object (index into the live ones, modulo), and what: add to a queue's
# column, or copy the object (the copy becomes a live object too).
steps = st.lists(
    st.tuples(
        st.integers(0, 7),
        st.sampled_from(["add", "add", "add", "copy"]),
        st.sampled_from(QUEUES),
        st.integers(0, len(TREE.columns) - 1),
        st.integers(-5, 5),
    ),
    max_size=60,
)


def snapshot(u: Usage) -> tuple[list[list[int]], list[list[int]], list[int]]:
    return [list(r) for r in u.usage], [list(r) for r in u.total], list(u.version)


@settings(max_examples=200, deadline=None)
@given(steps)
def test_copies_read_as_deep_copies(ops: list[tuple[int, str, int, int, int]]) -> None:
    live = [Usage(TREE)]
    reference = [copy.deepcopy(live[0])]
    for which, what, node, col, delta in ops:
        i = which % len(live)
        if what == "copy":
            live.append(live[i].copy())
            reference.append(copy.deepcopy(reference[i]))
        else:
            live[i].add(node, col, delta)
            reference[i].add(node, col, delta)
        for u, ref in zip(live, reference, strict=True):
            assert snapshot(u) == snapshot(ref)
            assert [u.available(q, c) for q in QUEUES for c in range(len(TREE.columns))] == [
                ref.available(q, c) for q in QUEUES for c in range(len(TREE.columns))
            ]
