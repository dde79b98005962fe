"""``JobView``s (what plugins know of a job), memoized by what they are made of.

Most of a view is a pure function of the job's spec and the cluster table's resource columns:
its demand and pod vectors, its static and pods keys. Those parts are memoized per (shared) pod
sets and placement (``reconciler.core.intern`` makes jobs with one spec share them), so a deep
queue costs one set of arrays per spec, not per job. The views themselves are kept only for the
jobs looked at lately: a decide looks at a job several times in a row.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import msgspec
import numpy as np
import numpy.typing as npt

from eventlog.events import Placement, PodSet, Resources
from reconciler.core.clusters import ClusterTable
from reconciler.core.framework.interface import JobView
from reconciler.core.jobs import JobRecord
from reconciler.core.resources import Vec

_key_encoder = msgspec.msgpack.Encoder()

RECENT_VIEWS = 8192  # views kept (cleared when full): more than one decide looks at in a row
SPEC_PARTS = 100_000  # parts kept (cleared when full): far more than a fleet's distinct specs


class _Pods(NamedTuple):
    """What a view takes from the pod sets and demand (both held: the memo key is their ids)."""

    pod_sets: list[PodSet]
    demand: Resources
    version: int
    demand_vec: Vec
    missing: tuple[str, ...]
    pod_tuple: tuple[PodSet, ...]
    pod_vecs: npt.NDArray[np.int64]
    pods_key: bytes


class _Static(NamedTuple):
    placement: Placement
    demand: Resources
    static_key: bytes


_VIEW_FIELDS = frozenset(f.name for f in dataclasses.fields(JobView))


def _new_view(**fields: Any) -> JobView:
    """``JobView(**fields)``, without the frozen dataclass's ``object.__setattr__`` per field
    when every field is given (a view is made for every new job a pass looks at)."""
    if fields.keys() != _VIEW_FIELDS:
        return JobView(**fields)
    view = object.__new__(JobView)
    view.__dict__.update(fields)
    return view


def static_key(job: JobRecord) -> bytes:
    p = job.placement
    return _key_encoder.encode(
        (p.cluster_selector, p.cluster_affinity.required, p.cluster_tolerations, p.cluster_names, job.demand)
    )


class ViewMemo:
    """Pure memo (never affects results)."""

    def __init__(self) -> None:
        # job key -> (table version, spec key, priority, view)
        self.recent: dict[str, tuple[int, bytes, int, JobView]] = {}
        self._pods: dict[tuple[int, int], _Pods] = {}
        self._static: dict[tuple[int, int], _Static] = {}

    def clear(self) -> None:
        self.recent.clear()
        self._pods.clear()
        self._static.clear()

    def view(self, table: ClusterTable, job: JobRecord) -> JobView:
        """Memoized per (table version, spec, priority): a pure function of the job and the table."""
        cached = self.recent.get(job.key)
        if (
            cached is not None
            and cached[0] == table.version
            and cached[1] is job.spec_key
            and cached[2] == job.priority
        ):
            return cached[3]
        pods = self._pods_of(table, job)
        static = self._static_of(job)
        view = _new_view(
            key=job.key,
            uid=job.ref.uid,
            placement=job.placement,
            priority=job.priority,
            demand=job.demand,
            demand_vec=pods.demand_vec,
            missing=pods.missing,
            static_key=static,
            namespace=job.ref.namespace,
            queue=job.queue or "default",
            pod_sets=pods.pod_tuple,
            pod_vecs=pods.pod_vecs,
            spec_key=job.spec_key,
            pods_key=pods.pods_key,
        )
        if len(self.recent) >= RECENT_VIEWS:
            self.recent.clear()
        self.recent[job.key] = (table.version, job.spec_key, job.priority, view)
        return view

    def _pods_of(self, table: ClusterTable, job: JobRecord) -> _Pods:
        key = (id(job.pod_sets), id(job.demand))
        got = self._pods.get(key)
        if (
            got is not None
            and got.pod_sets is job.pod_sets
            and got.demand is job.demand
            and got.version == table.version
        ):
            return got
        demand_vec = table.vector(job.demand)
        pod_vecs = np.array([table.vector(ps.requests) for ps in job.pod_sets], dtype=np.int64).reshape(
            len(job.pod_sets), len(table.resources)
        )
        demand_vec.flags.writeable = pod_vecs.flags.writeable = False  # shared by every job of the spec
        got = _Pods(
            pod_sets=job.pod_sets,
            demand=job.demand,
            version=table.version,
            demand_vec=demand_vec,
            missing=tuple(k for k in job.demand if k not in table.resources.index),
            pod_tuple=tuple(job.pod_sets),
            pod_vecs=pod_vecs,
            pods_key=_key_encoder.encode(job.pod_sets),
        )
        if len(self._pods) >= SPEC_PARTS:
            self._pods.clear()
        self._pods[key] = got
        return got

    def _static_of(self, job: JobRecord) -> bytes:
        key = (id(job.placement), id(job.demand))
        got = self._static.get(key)
        if got is not None and got.placement is job.placement and got.demand is job.demand:
            return got.static_key
        got = _Static(placement=job.placement, demand=job.demand, static_key=static_key(job))
        if len(self._static) >= SPEC_PARTS:
            self._static.clear()
        self._static[key] = got
        return got.static_key
