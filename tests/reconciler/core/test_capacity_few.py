"""ClusterHeadroom's survivors and CapacityScore's headroom for a few clusters are worked out
with plain integers (``capacity.FEW``), and so are a few clusters' total scores for a spec
class's ranking (``cycle.totals_of``); they must equal numpy's answers for the same clusters."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from eventlog import events as ev
from reconciler.core.framework import cycle
from reconciler.core.plugins import capacity
from reconciler.core.scratch import Scratch
from tests.reconciler.core.harness import Harness, cluster, job, ref
from tests.reconciler.core.test_spec_classes import POLICY

amounts = st.integers(0, 10_000)


@settings(max_examples=150, deadline=None)
@given(
    fleet=st.lists(st.tuples(amounts, amounts, amounts, amounts), min_size=1, max_size=2 * capacity.FEW),
    cpu=st.integers(1, 6_000),
    gpu=st.integers(0, 3),
    picks=st.lists(st.integers(0, 2 * capacity.FEW - 1), min_size=1, max_size=capacity.FEW, unique=True),
)
def test_a_few_clusters_as_numpy_has_them(
    fleet: list[tuple[int, int, int, int]], cpu: int, gpu: int, picks: list[int]
) -> None:
    h = Harness(policy=POLICY)
    for i, (cap_cpu, cap_gpu, used_cpu, used_gpu) in enumerate(fleet):
        h.inputs(
            cluster(f"c{i}", cpu=cap_cpu, gpu=cap_gpu),
            ev.ClusterHeartbeat(cluster=f"c{i}", usage={"cpu": used_cpu, "nvidia.com/gpu": used_gpu}),
        )
    h.inputs(job("x", cpu=cpu, gpu=gpu))
    s = Scratch.start(h.state)
    inp = s.cycle_input(h.state.jobs[ref("x").key])
    slots = np.array(sorted(p for p in picks if p < len(fleet)), dtype=np.intp)
    plain = capacity.ClusterHeadroom().filter(inp, slots)
    survivors = capacity.ClusterHeadroom().survivors(inp, slots)
    assert survivors is not None
    assert survivors.tolist() == slots[plain.passed()].tolist()
    scores = capacity.headroom_after(inp, slots)
    assert scores.dtype == np.int64
    assert scores.tolist() == capacity._headroom_plain(inp, slots).tolist()
    profile = h.state.profiles["default"]
    ranked = cycle.rank(profile, inp, candidates=slots)
    by_slot = dict(zip(ranked.ranked.tolist(), ranked.totals.tolist(), strict=True))
    assert cycle.totals_of(profile, inp, candidates=slots) == [by_slot[slot] for slot in slots.tolist()]
