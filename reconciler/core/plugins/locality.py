"""LocalityScore: prefer clusters whose labels match the profile's ``preferred`` labels.

Arguments: ``preferred`` maps label -> value (e.g. ``topology.kubernetes.io/region: eu-west``,
the manager's own region, so data and users stay close); a cluster earns the weight of each
label it matches (``weights``, default 1 each). Normalized so the best match gets 100. With no
``preferred`` labels every cluster scores 0 and the plugin does not change the ranking.
"""

from __future__ import annotations

import numpy as np
from msgspec import Struct, field

from reconciler.core.framework.interface import CycleInput, ScorePlugin, Scores, Slots

NAME = "LocalityScore"


class LocalityArgs(Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    preferred: dict[str, str] = field(default_factory=dict)
    weights: dict[str, int] = field(default_factory=dict)


class LocalityScore(ScorePlugin):
    name = NAME
    Args = LocalityArgs

    def __init__(self, args: LocalityArgs | None = None) -> None:
        super().__init__(args or LocalityArgs())
        self.preferred: dict[str, str] = dict(self.args.preferred)
        self.weights: dict[str, int] = dict(self.args.weights)

    def score(self, inp: CycleInput, candidates: Slots) -> Scores:
        total = np.zeros(len(candidates), dtype=np.int64)
        for key in sorted(self.preferred):
            hit = inp.clusters.label(key).matching([self.preferred[key]], candidates)
            total += hit.astype(np.int64) * max(self.weights.get(key, 1), 0)
        return total
