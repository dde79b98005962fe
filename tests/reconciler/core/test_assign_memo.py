"""``admit.assign`` keeps the wait it gave a queue and demand while the usage up the queue's
cohort tree stays the same (``Usage.stamp``). Whatever the order of usage changes, copies and
questions, every answer must be the one worked out afresh."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from eventlog.events import Resources
from reconciler.core.queues import admit
from reconciler.core.queues.usage import Usage
from tests.reconciler.core.test_usage_copy import QUEUES, TREE

# Demands are held (the memo knows them by identity, as interned job specs).
DEMANDS: list[Resources] = [{"cpu": 4}, {"cpu": 9}, {"cpu": 2, "nvidia.com/gpu": 1}, {"nvidia.com/gpu": 2}]

# One step: on which object (index into the live ones, modulo), and what: add to a queue's
# column, copy the object (the copy counts its versions on from the original's), or ask.
steps = st.lists(
    st.tuples(
        st.integers(0, 3),
        st.sampled_from(["add", "add", "copy", "assign", "assign", "assign"]),
        st.sampled_from(QUEUES),
        st.integers(0, len(TREE.columns) - 1),
        st.integers(-3, 6),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_remembered_waits_are_the_answers_afresh(ops: list[tuple[int, str, int, int, int]]) -> None:
    live = [Usage(TREE)]
    for which, what, node, col, n in ops:
        u = live[which % len(live)]
        if what == "copy":
            live.append(u.copy())
        elif what == "add":
            u.add(node, col, n)
        else:
            demand = DEMANDS[n % len(DEMANDS)]
            assert admit.assign(u, node, demand) == admit._assign_planned(copy.deepcopy(u), node, demand)


def test_a_wait_is_not_kept_past_a_change_in_the_cohort() -> None:
    """A sibling borrowing from the cohort changes what the queue is told, in the same pass."""
    u = Usage(TREE)
    q0, q2, q4 = TREE.queue["q0"], TREE.queue["q2"], TREE.queue["q4"]  # cohort co0, nominal cpu 8, 10, 12
    cpu = TREE.column[("default", "cpu")]
    demand = DEMANDS[1]
    for node, used in ((q0, 8), (q2, 10), (q4, 10)):
        u.add(node, cpu, used)  # two left to lend to q0
    before = admit.assign(u, q0, demand)
    assert isinstance(before, admit.Wait)
    u.add(q4, cpu, 1)  # q4 takes one of them
    after = admit.assign(u, q0, demand)
    assert isinstance(after, admit.Wait)
    assert after.message != before.message
    assert after == admit._assign_planned(u, q0, demand)
