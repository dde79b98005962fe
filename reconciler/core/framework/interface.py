"""What a plugin is: a name, reason messages, a factory, and Filter and/or Score.

Third-party plugins implement the same classes and register through the ``kdispatch.plugins``
entry-point group, which the shell reads (``reconciler.edge.plugins``) to build the ``Registry``
the core is handed. A plugin is built once per profile from its validated
arguments and must be a pure function of its inputs: no clock, no I/O, no randomness.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
from msgspec import Struct

from eventlog.events import Placement, PodSet, Resources
from reconciler.core.clusters import ClusterTable
from reconciler.core.framework.status import Reason
from reconciler.core.inflight import InFlight
from reconciler.core.resources import Vec

Codes = npt.NDArray[np.int32]
Scores = npt.NDArray[np.int64]
Slots = npt.NDArray[np.intp]

MAX_SCORE = 100


@dataclass(frozen=True)
class JobView:
    """What plugins may know about the job being placed."""

    key: str
    uid: str
    placement: Placement
    priority: int
    demand: Resources  # the whole gang, summed over pod sets
    demand_vec: Vec  # the same as a row over the table's resource columns
    missing: tuple[str, ...]  # demanded resources that no cluster has ever declared
    static_key: bytes = b""  # what static filters depend on: selector, required terms, tolerations, pins, demand
    # The pods themselves, for plugins that look inside a worker (nodes, its Kueue queues):
    namespace: str = ""
    queue: str = "default"  # the LocalQueue the remote copy lands in on a worker
    pod_sets: tuple[PodSet, ...] = ()
    pod_vecs: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))  # per pod
    spec_key: bytes = b""  # everything above that a verdict can depend on (pure memo key)
    pods_key: bytes = b""  # the pod sets alone (memo key of verdicts that depend only on them)


@dataclass
class CycleInput:
    """One job against all clusters. ``free`` already excludes claims held for others; ``ready``
    is cluster health as of this decide pass (a cluster lost earlier in the pass is not ready)."""

    job: JobView
    clusters: ClusterTable
    free: npt.NDArray[np.int64]
    ready: npt.NDArray[np.bool_]
    now_ms: int
    # Our copies sent to workers' Kueue and not admitted there yet (None: no worker reported
    # queues, or the caller does not track them).
    in_flight: InFlight | None = None


@dataclass
class FilterResult:
    """Per cluster of the ``slots`` the filter was asked about (same order): 0 = passes,
    i > 0 = rejected for ``reasons[i - 1]``."""

    verdict: Codes
    reasons: list[Reason] = field(default_factory=list)
    skipped: bool = False
    failed: bool = False  # the plugin raised: every cluster rejected with the error (run_filter)

    @staticmethod
    def passing(n: int) -> FilterResult:
        return FilterResult(verdict=np.zeros(n, dtype=np.int32), skipped=True)

    @staticmethod
    def from_mask(ok: npt.NDArray[np.bool_], reason: Reason) -> FilterResult:
        verdict = np.logical_not(ok).astype(np.int32)
        return FilterResult(verdict=verdict, reasons=[reason])

    def passed(self) -> npt.NDArray[np.bool_]:
        return np.asarray(self.verdict == 0)


class Plugin:
    """Base of every plugin. Subclasses set ``name`` and, if they take arguments, ``Args``."""

    name: ClassVar[str] = ""
    Args: ClassVar[type[Struct] | None] = None

    def __init__(self, args: Any = None) -> None:
        self.args = args


class FilterPlugin(Plugin):
    # True when the verdict depends only on the job's spec and the clusters' labels, taints and
    # capacity (not on usage or health): such verdicts are cached per (spec, table version).
    static: ClassVar[bool] = False
    # True when the verdict on a cluster depends only on that cluster's own row of the input
    # (free capacity, health, our copies in flight there) and on what is fixed for a pass: a
    # change on one cluster then changes no verdict elsewhere (``Scratch.still_fits``).
    per_cluster: ClassVar[bool] = False

    def cache_key(self, job: JobView) -> Hashable | None:
        """For a static filter: the part of the job its verdicts and reasons depend on. Jobs
        with equal keys then share one evaluation over every cluster (per table version), so a
        new job spec costs a lookup per filter instead of a pass over the clusters, as long as
        each part of it was seen before. Each cluster's verdict must depend only on that
        cluster and the key. None (the default): the job's whole ``static_key``, with the
        filter run on the survivors of the filters before it."""
        return None

    def idle(self, clusters: ClusterTable) -> bool:
        """True when, with this table (its version and facts), the filter passes every cluster
        for every job and reports nothing (``FilterResult.passing``): the framework skips it
        until the table changes. For filters of facts no worker reported yet."""
        return False

    def survivors(self, inp: CycleInput, slots: Slots) -> Slots | None:
        """The clusters of ``slots`` that pass (those ``filter`` gives verdict 0), in order, or
        None to have ``filter`` asked. Dispatch only needs the survivors; a filter that can
        find them without building verdicts and reasons saves that per job. None (the
        default) or raising: ``filter`` answers, as always."""
        return None

    # False when evicting jobs cannot be shown to make the filter pass: its UNSCHEDULABLE
    # rejections still mean "wait for room", but preemption does not count such a cluster as a
    # candidate. Victims are chosen by the cluster totals they free; a filter judging facts
    # the totals do not locate (which node a victim's pods are on, which worker quota it uses)
    # would otherwise see victims evicted that free nothing it needs.
    preemptible: ClassVar[bool] = True

    def filter(self, inp: CycleInput, slots: Slots) -> FilterResult:
        """Verdicts for the clusters ``slots`` (indexes into the table), in that order. The
        framework passes the survivors of earlier filters when it only needs the feasible set,
        and every cluster when it explains."""
        raise NotImplementedError


class ScorePlugin(Plugin):
    # True when a cluster's normalized score depends only on that cluster's own row of the input
    # (free capacity, health, our copies in flight there), what is fixed for a pass, and the job's
    # spec (``JobView.spec_key``), and ``normalize`` maps each raw score on its own: a change on
    # one cluster then moves no other cluster's score, so the jobs of one spec class rank from
    # one ranking kept up to date (``reconciler.core.spec_classes``).
    per_cluster: ClassVar[bool] = False

    def cache_key(self, job: JobView) -> Hashable | None:
        """The part of the job the raw scores depend on, when they depend only on it and on
        the clusters' labels, taints and capacity (not usage or health): raw scores are then
        computed once per key over every cluster (per table version) and read for the
        candidates; normalizing still sees only the candidates. Each cluster's raw score must
        depend only on that cluster and the key. None (the default): scored per job."""
        return None

    def idle(self, clusters: ClusterTable) -> bool:
        """True when, with this table (its version and facts), the plugin scores 0 on every
        cluster for every job: the framework does not ask it until the table changes."""
        return False

    def score(self, inp: CycleInput, candidates: Slots) -> Scores:
        """Raw integer scores for ``candidates`` (any non-negative range)."""
        raise NotImplementedError

    def normalize(self, scores: Scores) -> Scores:
        """Map raw scores onto 0..MAX_SCORE; the default scales by the maximum."""
        return normalize_by_max(scores)


def normalize_by_max(scores: Scores, *, reverse: bool = False) -> Scores:
    """kube-scheduler's DefaultNormalizeScore: integer scaling so the best gets MAX_SCORE."""
    if len(scores) == 0:
        return scores
    top = int(scores.max())
    if top <= 0:
        out = np.zeros_like(scores) if not reverse else np.full_like(scores, MAX_SCORE)
        return out
    scaled = scores * MAX_SCORE // top
    return MAX_SCORE - scaled if reverse else scaled


def first_failure(failing: npt.NDArray[np.bool_]) -> Codes:
    """Rows x checks -> per row 0 if no check fails, else 1 + the index of the first failing one."""
    verdict = np.zeros(failing.shape[0], dtype=np.int32)
    for j in range(failing.shape[1] - 1, -1, -1):  # few checks, many rows: loop over checks
        verdict[failing[:, j]] = j + 1
    return verdict
