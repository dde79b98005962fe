"""Hypothesis: ``rank`` (range check, weights and sum of every score plugin at once) ranks as
kube-scheduler's pipeline run one plugin at a time: score -> normalize -> clamp to 0..100 ->
weight -> sum, ties to the cluster whose name sorts first; a plugin that raises or answers for
the wrong number of clusters scores 0; an idle one is not asked."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from eventlog import events as ev
from reconciler.core.framework.cycle import rank
from reconciler.core.framework.interface import MAX_SCORE, CycleInput, ScorePlugin, Scores, Slots
from reconciler.core.framework.profile import CompiledProfile
from reconciler.core.scratch import Scratch
from tests.reconciler.core.harness import Harness, cluster, job

NAMES = ["d", "a", "c", "e", "b", "f"]


class Scripted(ScorePlugin):
    """Answers what it was told: raw scores per cluster slot, in some dtype, or a failure."""

    def __init__(self, raw: list[int], how: str) -> None:
        super().__init__()
        self.raw, self.how = raw, how

    def idle(self, clusters: Any) -> bool:
        return self.how == "idle"

    def score(self, inp: CycleInput, candidates: Slots) -> Scores:
        if self.how == "raise":
            raise RuntimeError("boom")
        out = np.asarray(self.raw, dtype=np.int64)[candidates]
        if self.how == "short":
            return out[:-1]
        if self.how == "float":
            return out.astype(np.float64) / 3  # type: ignore[no-any-return]
        return out

    def normalize(self, scores: Scores) -> Scores:
        return scores  # out of range on purpose: the framework clamps


def reference(
    plugins: list[tuple[str, int, Scripted]], inp: CycleInput, candidates: Slots
) -> list[tuple[int, int]]:
    """(slot, total) best first, one plugin at a time."""
    totals = np.zeros(len(candidates), dtype=np.int64)
    for _, weight, plugin in plugins:
        if plugin.idle(None):
            continue
        try:
            norm = plugin.normalize(plugin.score(inp, candidates))
            if len(norm) != len(candidates):
                raise ValueError
        except Exception:
            norm = np.zeros(len(candidates), dtype=np.int64)
        totals += np.minimum(np.maximum(norm, 0), MAX_SCORE).astype(np.int64) * weight
    table = inp.clusters
    order = sorted(range(len(candidates)), key=lambda i: (-int(totals[i]), table.names[int(candidates[i])]))
    return [(int(candidates[i]), int(totals[i])) for i in order]


@settings(max_examples=150, deadline=None)
@given(
    plugins=st.lists(
        st.tuples(
            st.integers(0, 5),
            st.lists(st.integers(-50, 250), min_size=len(NAMES), max_size=len(NAMES)),
            st.sampled_from(["int", "int", "float", "raise", "short", "idle"]),
        ),
        max_size=5,
    ),
    chosen=st.sets(st.integers(0, len(NAMES) - 1), min_size=1),
)
def test_rank_is_the_pipeline_one_plugin_at_a_time(
    plugins: list[tuple[int, list[int], str]], chosen: set[int]
) -> None:
    h = Harness()
    h.inputs(*(cluster(n) for n in NAMES))
    spec: ev.JobSubmitted = job("j")
    h.inputs(spec)
    inp = Scratch.start(h.state).cycle_input(h.state.jobs[spec.job.key])
    scripted = [(f"p{i}", weight, Scripted(raw, how)) for i, (weight, raw, how) in enumerate(plugins)]
    profile = CompiledProfile(spec=ev.Profile(name="t"), filters=[], scores=list(scripted))  # type: ignore[arg-type]
    candidates = np.array(sorted(chosen), dtype=np.intp)
    got = rank(profile, inp, candidates=candidates)
    assert list(zip(got.ranked.tolist(), got.totals.tolist(), strict=True)) == reference(
        scripted, inp, candidates
    )
    assert [name for name, _, _ in got.plugin_scores] == [name for name, _, _ in scripted]
    weighted = sum((w * s for _, w, s in got.plugin_scores), np.zeros(len(candidates), dtype=np.int64))
    assert weighted.tolist() == got.totals.tolist()
