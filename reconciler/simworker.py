"""A simulated worker cluster that behaves like a Kueue worker: pure, no clock, no I/O.

Whoever drives it passes the time: the real-time driver (``reconciler.service.clusters.simulated``) with
the wall clock, ``kdispatch simulate`` with virtual time. Both call ``advance(now_ms)`` at
``next_event_ms()`` and publish the facts it returns.

Model (Kueue with one ClusterQueue, ``BestEffortFIFO``):

- quota per resource: ``capacity`` lists the limited resources; a resource not listed is not
  limited (a job asking for memory on a cluster whose capacity names only GPUs still fits);
- a copy becomes admissible ``admission_latency_ms`` after its creation (plus any injected slow
  admission); admissible copies are admitted in priority order, then creation order (FIFO); a
  copy that does not fit does not block smaller ones behind it (BestEffortFIFO);
- an admitted copy runs for its runtime (``runtime_ms`` or ``default_runtime_ms``) and finishes,
  releasing its quota; finished copies stay until deleted, like Kueue's finished Workloads;
- ``evict`` stops a copy (admitted or pending) for good: it is not readmitted, because the
  dispatcher requeues the job as a new attempt rather than reusing the evicted copy;
- ``create`` of a (job uid, attempt) the worker already has, or had and deleted, is ignored, so
  a restarted or second actuator never makes a copy twice.

Fault injection: ``silence(until_ms)`` (None: for good, until ``recover``): requests are lost,
facts are held back and delivered when it ends, heartbeats report unreachable;
``reject_next(n)``; ``slow_admission(extra_ms, until_ms)``; ``fail_next(n)``.

Nodes (optional, ``nodes=``): the worker has real nodes (``SimNode``) and a copy is admitted
only when every pod of it is bound to a node with room (all or none: a gang), as a worker whose
Kueue admits within its nodes' room (or a plain scheduler) would start it; the quota is then the
nodes' sum and is not checked separately. Pods are bound as kube-scheduler's default
``NodeResourcesFit`` scores (``LeastAllocated``: the node with the most free CPU and memory,
as a share of its allocatable, averaged; ties to the first node), or ``MostAllocated`` (bin
packing), or first fit; pod sets with the largest pods first. A pod's ``node_selector``,
``node_affinity`` and ``tolerations`` count against the nodes' labels and taints. With
``report_nodes`` the worker also reports ``ClusterCapacityReported`` (see ``NodePool``): the
whole picture on its first ``advance``, then the node groups whose free-capacity histogram
changed, once per instant.

Performance: events live on a heap of (time, seq); pending copies are bucketed by shape so an
admission pass costs the number of distinct shapes, not the queue length (see ``_admit``).
Nothing is scanned per tick; node fits are one numpy comparison over the worker's nodes.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Literal, NamedTuple

import msgspec
import numpy as np

from eventlog.events import (
    ClusterCapacityReported,
    ClusterHeartbeat,
    FreeBin,
    InputEvent,
    JobRef,
    MatchExpression,
    NodeGroup,
    PodSet,
    RemoteAdmitted,
    RemoteCreated,
    RemoteEvicted,
    RemoteFinished,
    RemoteGone,
    RemoteRejected,
    Resources,
    SelectorTerm,
    Taint,
    Toleration,
)

CopyKey = tuple[str, int]  # (job uid, attempt)
Scoring = Literal["LeastAllocated", "MostAllocated", "FirstFit"]
SCORINGS: tuple[Scoring, ...] = ("LeastAllocated", "MostAllocated", "FirstFit")

# Free capacity is reported rounded down to these steps (other resources: exact), so the core
# never sees a fit that is not there, and nodes a few millicores apart share one histogram bin.
# 10 milli-GPUs is the Alibaba trace's own granularity of GPU sharing.
REPORT_STEPS: dict[str, int] = {"cpu": 100, "memory": 256 * 1024 * 1024, "alibaba.com/gpu-milli": 10}


class SimNode(msgspec.Struct, frozen=True, kw_only=True):
    """One node of a simulated worker: what it can hold (``Resources`` units), its labels and
    taints."""

    name: str
    allocatable: Resources
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    taints: list[Taint] = msgspec.field(default_factory=list)


def _expression_matches(expr: MatchExpression, labels: Mapping[str, str]) -> bool:
    value = labels.get(expr.key)
    match expr.operator:
        case "In":
            return value is not None and value in expr.values
        case "NotIn":
            return value is None or value not in expr.values
        case "Exists":
            return value is not None
        case "DoesNotExist":
            return value is None
        case "Gt" | "Lt":
            try:
                have, bound = int(value or ""), int(expr.values[0])
            except (ValueError, IndexError):
                return False
            return have > bound if expr.operator == "Gt" else have < bound
    return False


def _tolerates(tolerations: Sequence[Toleration], taint: Taint) -> bool:
    for t in tolerations:
        if t.effect and t.effect != taint.effect:
            continue
        if t.operator == "Exists" and (not t.key or t.key == taint.key):
            return True
        if t.operator == "Equal" and t.key == taint.key and t.value == taint.value:
            return True
    return False


def node_admits(node: SimNode, pod_set: PodSet) -> bool:
    """Whether ``pod_set``'s pods may land on ``node`` (labels and taints; room is the pool's)."""
    if any(node.labels.get(k) != v for k, v in pod_set.node_selector.items()):
        return False
    terms: Sequence[SelectorTerm] = pod_set.node_affinity
    if terms and not any(all(_expression_matches(e, node.labels) for e in t.match_expressions) for t in terms):
        return False
    return all(
        _tolerates(pod_set.tolerations, taint) for taint in node.taints if taint.effect in ("NoSchedule", "NoExecute")
    )


def _constraints_key(pod_set: PodSet) -> bytes:
    return msgspec.json.encode(
        (sorted(pod_set.node_selector.items()), pod_set.node_affinity, pod_set.tolerations)
    )


def node_shape(pod_sets: Iterable[PodSet]) -> tuple[object, ...]:
    """What decides where a gang fits: per pod set the count, per-pod requests and constraints.
    Copies of one shape fit or do not fit alike."""
    return tuple(
        (ps.count, tuple(sorted((r, a) for r, a in ps.requests.items() if a)), _constraints_key(ps)) for ps in pod_sets
    )


def _group_id(labels: Mapping[str, str], taints: Sequence[Taint]) -> str:
    parts = [f"{k}={v}" for k, v in sorted(labels.items())]
    parts += [f"taint:{t.key}={t.value}:{t.effect}" for t in taints]
    return ",".join(parts) or "nodes"


class NodePool:
    """The nodes of one worker: free capacity per node, pods bound to them, and the
    ``NodeGroup`` histograms a worker reports.

    Free capacity is an (nodes x resources) integer array; a fit is one vectorized comparison.
    Nodes with the same labels and taints form one group (no topology: the Alibaba node list
    has none); a group's bins are its nodes' free capacity rounded down to ``REPORT_STEPS``,
    identical rounded vectors merged into one bin with a count.
    """

    def __init__(self, nodes: Sequence[SimNode], *, scoring: Scoring = "LeastAllocated") -> None:
        if not nodes:
            raise ValueError("a node pool needs at least one node")
        self.nodes = list(nodes)
        self.scoring = scoring
        self.resources = tuple(sorted({r for n in nodes for r in n.allocatable}))
        self._col = {r: i for i, r in enumerate(self.resources)}
        self.allocatable = np.array(
            [[n.allocatable.get(r, 0) for r in self.resources] for n in nodes], dtype=np.int64
        ).reshape(len(nodes), len(self.resources))
        self.free = self.allocatable.copy()
        # LeastAllocated/MostAllocated weigh CPU and memory, as kube-scheduler does by default.
        scored = [self._col[r] for r in ("cpu", "memory") if r in self._col] or list(range(len(self.resources)))
        self._scored = np.array(scored, dtype=np.intp)
        self._scale = np.maximum(self.allocatable[:, self._scored], 1).astype(np.float64)
        steps = np.array([REPORT_STEPS.get(r, 1) for r in self.resources], dtype=np.int64)
        self._steps = steps
        self._bound: dict[CopyKey, list[tuple[int, np.ndarray]]] = {}
        self._eligible: dict[bytes, np.ndarray] = {}
        groups: dict[str, list[int]] = {}
        self._group_meta: dict[str, tuple[dict[str, str], list[Taint]]] = {}
        for i, n in enumerate(nodes):
            gid = _group_id(n.labels, n.taints)
            groups.setdefault(gid, []).append(i)
            self._group_meta[gid] = (dict(sorted(n.labels.items())), list(n.taints))
        self._groups = {gid: np.array(ix, dtype=np.intp) for gid, ix in sorted(groups.items())}
        self._group_of = [""] * len(nodes)
        for gid, ix in self._groups.items():
            for i in ix:
                self._group_of[int(i)] = gid
        self._dirty: set[str] = set()
        self._reported: dict[str, list[FreeBin]] = {}

    # -- fit and binding ---------------------------------------------------------------------

    def _eligible_for(self, pod_set: PodSet) -> np.ndarray:
        key = _constraints_key(pod_set)
        mask = self._eligible.get(key)
        if mask is None:
            mask = np.array([node_admits(n, pod_set) for n in self.nodes], dtype=bool)
            self._eligible[key] = mask
        return mask

    def _request(self, pod_set: PodSet) -> np.ndarray | None:
        """The per-pod request as a vector over the pool's resources; None if it asks for a
        resource no node has (it can never fit)."""
        vec = np.zeros(len(self.resources), dtype=np.int64)
        for res, amount in pod_set.requests.items():
            if amount <= 0:
                continue
            col = self._col.get(res)
            if col is None:
                return None
            vec[col] = amount
        return vec

    def _order(self, pod_sets: Iterable[PodSet]) -> list[PodSet]:
        """Largest pods first (by their largest share of a node's allocatable), so a gang's big
        pods are not left without a node by its small ones."""
        peak = np.maximum(self.allocatable.max(axis=0), 1)

        def size(ps: PodSet) -> float:
            vec = self._request(ps)
            return float("inf") if vec is None else float((vec / peak).max(initial=0.0))

        return sorted(pod_sets, key=size, reverse=True)

    def _pick(self, fits: np.ndarray, request: np.ndarray) -> int:
        candidates = np.flatnonzero(fits)
        if self.scoring == "FirstFit" or len(candidates) == 1:
            return int(candidates[0])
        left = (self.free[candidates][:, self._scored] - request[self._scored]) / self._scale[candidates]
        score = left.mean(axis=1)
        best = np.argmax(score) if self.scoring == "LeastAllocated" else np.argmin(score)
        return int(candidates[int(best)])

    def place(self, pod_sets: Iterable[PodSet], *, key: CopyKey | None) -> bool:
        """Bind every pod to a node, or none. ``key`` None: only try (nothing stays bound)."""
        bound: list[tuple[int, np.ndarray]] = []
        ok = True
        for ps in self._order(pod_sets):
            request = self._request(ps)
            if request is None:
                ok = False
                break
            eligible = self._eligible_for(ps)
            for _ in range(ps.count):
                fits = eligible & (self.free >= request).all(axis=1)
                if not fits.any():
                    ok = False
                    break
                node = self._pick(fits, request)
                self.free[node] -= request
                bound.append((node, request))
            if not ok:
                break
        if not ok or key is None:
            for node, request in bound:
                self.free[node] += request
            return ok
        self._bound[key] = bound
        self._dirty.update(self._group_of[node] for node, _ in bound)
        return True

    def fits(self, pod_sets: Iterable[PodSet]) -> bool:
        return self.place(pod_sets, key=None)

    def release(self, key: CopyKey) -> None:
        for node, request in self._bound.pop(key, ()):
            self.free[node] += request
            self._dirty.add(self._group_of[node])

    def bound_nodes(self, key: CopyKey) -> list[str]:
        """The nodes the copy's pods are bound to, one entry per pod."""
        return [self.nodes[node].name for node, _ in self._bound.get(key, ())]

    # -- reporting -----------------------------------------------------------------------------

    def _bins(self, gid: str) -> list[FreeBin]:
        rows = self.free[self._groups[gid]]
        # A group is a few nodes to a few hundred: counting tuples beats np.unique(axis=0) here.
        counts = Counter(map(tuple, (rows // self._steps * self._steps).tolist()))
        # Most free first: the order a reader scans for a fit.
        return [
            FreeBin(count=n, free=dict(zip(self.resources, values, strict=True)))
            for values, n in sorted(counts.items(), key=lambda item: tuple(-v for v in item[0]))
        ]

    def _group(self, gid: str, bins: list[FreeBin]) -> NodeGroup:
        labels, taints = self._group_meta[gid]
        # What the group's largest node holds when empty (per resource), so that a pod no node
        # could ever hold is told apart from one that waits for room.
        peak = self.allocatable[self._groups[gid]].max(axis=0)
        allocatable = {r: int(peak[c]) for c, r in enumerate(self.resources)}
        return NodeGroup(id=gid, labels=dict(labels), taints=list(taints), bins=bins, allocatable=allocatable)

    def full_report(self, cluster: str) -> ClusterCapacityReported:
        self._dirty.clear()
        self._reported = {gid: self._bins(gid) for gid in self._groups}
        groups = [self._group(gid, bins) for gid, bins in self._reported.items()]
        return ClusterCapacityReported(cluster=cluster, full=True, node_groups=groups, topology_levels=[])

    def changes(self, cluster: str) -> ClusterCapacityReported | None:
        """The groups whose reported histogram changed since the last report, or None."""
        changed = []
        for gid in sorted(self._dirty):
            bins = self._bins(gid)
            if bins != self._reported.get(gid):
                self._reported[gid] = bins
                changed.append(self._group(gid, bins))
        self._dirty.clear()
        return ClusterCapacityReported(cluster=cluster, node_groups=changed) if changed else None


class CopyState(StrEnum):
    WAITING = "Waiting"  # created, admission latency not yet over
    PENDING = "Pending"  # admissible, waiting for quota
    ADMITTED = "Admitted"
    FINISHED = "Finished"
    EVICTED = "Evicted"


class CopyView(NamedTuple):
    """What a test, the GC or the demo sees of one remote copy."""

    job: JobRef
    attempt: int
    state: CopyState
    priority: int
    demand: Resources
    created_ms: int
    admitted_ms: int | None


class _Copy:
    __slots__ = (
        "admitted_ms",
        "attempt",
        "created_ms",
        "demand",
        "job",
        "order",
        "pod_sets",
        "priority",
        "runtime_ms",
        "state",
        "token",
    )

    def __init__(
        self,
        *,
        job: JobRef,
        attempt: int,
        pod_sets: list[PodSet],
        priority: int,
        runtime_ms: int,
        created_ms: int,
        order: int,
    ) -> None:
        self.job = job
        self.attempt = attempt
        self.pod_sets = pod_sets
        self.demand = demand_of(pod_sets)
        self.priority = priority
        self.runtime_ms = runtime_ms
        self.created_ms = created_ms
        self.order = order
        self.state = CopyState.WAITING
        self.admitted_ms: int | None = None
        self.token = 0  # bumped when a scheduled event about this copy is cancelled

    @property
    def key(self) -> CopyKey:
        return (self.job.uid, self.attempt)

    def sort_key(self) -> tuple[int, int, int]:
        return (-self.priority, self.created_ms, self.order)


# Heap event kinds.
_ELIGIBLE = 0
_FINISH = 1
_UNSILENCE = 2
_RELEASED = 3  # quota released by a request (delete/evict): run an admission pass then


def _time_of(item: tuple[int, InputEvent]) -> int:
    return item[0]


def _view(c: _Copy) -> CopyView:
    return CopyView(
        job=c.job,
        attempt=c.attempt,
        state=c.state,
        priority=c.priority,
        demand=dict(c.demand),
        created_ms=c.created_ms,
        admitted_ms=c.admitted_ms,
    )


def demand_of(pod_sets: Iterable[PodSet]) -> Resources:
    """The whole gang's demand: per-pod requests times the pod count, summed over pod sets."""
    total: Resources = {}
    for ps in pod_sets:
        for res, amount in ps.requests.items():
            total[res] = total.get(res, 0) + amount * ps.count
    return total


class SimWorker:
    def __init__(
        self,
        name: str,
        capacity: Resources,
        *,
        admission_latency_ms: int = 0,
        default_runtime_ms: int = 30_000,
        nodes: Sequence[SimNode] = (),
        scoring: Scoring = "LeastAllocated",
        report_nodes: bool = True,
    ) -> None:
        """``nodes``: bind pods to these (see the module's docstring); ``report_nodes``: also
        report them (``ClusterCapacityReported``); False models a worker whose adapter reports
        only its usage, as before node facts existed."""
        self.name = name
        self.capacity: Resources = dict(capacity)
        self.admission_latency_ms = admission_latency_ms
        self.default_runtime_ms = default_runtime_ms
        self._free: Resources = dict(capacity)
        self._used: Resources = {}
        self._usage: Resources | None = None
        self._copies: dict[CopyKey, _Copy] = {}
        self._gone: set[CopyKey] = set()  # deleted or rejected: a late duplicate create is ignored
        self._heap: list[tuple[int, int, int, CopyKey | None, int]] = []  # (t, seq, kind, key, token)
        self._seq = 0
        self._limited = tuple(sorted(self.capacity))
        self.nodes = NodePool(nodes, scoring=scoring) if nodes else None
        self._report_nodes = report_nodes and self.nodes is not None
        self._reported_full = False
        # Pending copies by shape (demand of the limited resources; with nodes, ``node_shape``),
        # each a heap in priority then FIFO order; see ``_admit``.
        self._buckets: dict[tuple[object, ...], list[tuple[tuple[int, int, int], CopyKey]]] = {}
        self._dirty: set[tuple[object, ...]] = set()  # shapes with arrivals since the last pass
        self._shape_pods: dict[tuple[object, ...], list[PodSet]] = {}
        self._released = False  # quota was released since the last admission pass
        self._outbox: list[tuple[int, InputEvent]] = []
        self._silent_until: int | None = None
        self._silent = False
        self._reject_next = 0
        self._reject_reason = ""
        self._fail_next = 0
        self._slow_extra_ms = 0
        self._slow_until: int | None = None

    # ------------------------------------------------------------------ requests (the actuator)

    def create(
        self,
        job: JobRef,
        attempt: int,
        pod_sets: Iterable[PodSet],
        priority: int,
        runtime_ms: int | None,
        now_ms: int,
    ) -> bool:
        """Create the copy of ``job``'s ``attempt``. False if the request was lost (silent)."""
        if self._is_silent(now_ms):
            return False
        key = (job.uid, attempt)
        if key in self._copies or key in self._gone:
            return True  # a duplicate request: already done
        if self._reject_next > 0:
            self._reject_next -= 1
            self._gone.add(key)
            reason = self._reject_reason or "RejectedByWorker"
            self._emit(now_ms, RemoteRejected(job=job, cluster=self.name, attempt=attempt, reason=reason))
            return True
        self._seq += 1
        copy = _Copy(
            job=job,
            attempt=attempt,
            pod_sets=list(pod_sets),
            priority=priority,
            runtime_ms=self.default_runtime_ms if runtime_ms is None else runtime_ms,
            created_ms=now_ms,
            order=self._seq,
        )
        self._copies[key] = copy
        self._emit(now_ms, RemoteCreated(job=job, cluster=self.name, attempt=attempt))
        self._schedule(now_ms + self._admission_delay(now_ms), _ELIGIBLE, key, copy.token)
        return True

    def adopt(
        self, job: JobRef, attempt: int, pod_sets: Iterable[PodSet], priority: int, runtime_ms: int, now_ms: int
    ) -> None:
        """A copy already admitted when the model starts (a start-time forecast begins from a live
        state): it holds its quota from ``now_ms`` and finishes ``runtime_ms`` later. Nothing is
        reported about the adoption itself: the caller's state already knows the copy runs."""
        self._seq += 1
        copy = _Copy(
            job=job,
            attempt=attempt,
            pod_sets=list(pod_sets),
            priority=priority,
            runtime_ms=runtime_ms,
            created_ms=now_ms,
            order=self._seq,
        )
        self._copies[copy.key] = copy
        self._start(copy, now_ms)
        self._outbox.pop()  # the RemoteAdmitted ``_start`` emits: already known

    def delete(self, job_uid: str, attempt: int, now_ms: int) -> bool:
        """Delete the copy (releasing its quota); reports ``RemoteGone`` once. False if lost."""
        if self._is_silent(now_ms):
            return False
        key = (job_uid, attempt)
        if key in self._gone:
            return True
        self._gone.add(key)
        copy = self._copies.pop(key, None)
        if copy is None:
            return True  # never reached us: nothing to report about it
        self._stop(copy, now_ms)
        self._emit(now_ms, RemoteGone(job=copy.job, cluster=self.name, attempt=attempt))
        return True

    def evict(self, job_uid: str, attempt: int, now_ms: int, *, reason: str = "Preempted") -> bool:
        """Stop the copy and release its quota; reports ``RemoteEvicted``. False if lost."""
        if self._is_silent(now_ms):
            return False
        copy = self._copies.get((job_uid, attempt))
        if copy is None or copy.state in (CopyState.FINISHED, CopyState.EVICTED):
            return True
        self._stop(copy, now_ms)
        copy.state = CopyState.EVICTED
        self._emit(now_ms, RemoteEvicted(job=copy.job, cluster=self.name, attempt=attempt, reason=reason))
        return True

    # ------------------------------------------------------------------ time

    def next_event_ms(self) -> int | None:
        """When ``advance`` next has something to do (facts to deliver count as due now)."""
        best: int | None = None
        if self._outbox and not self._silent:
            best = self._outbox[0][0]
        heap = self._heap
        while heap and self._stale(heap[0]):  # drop cancelled events (lazy deletion)
            heapq.heappop(heap)
        if heap and (best is None or heap[0][0] < best):
            best = heap[0][0]
        return best

    def advance(self, now_ms: int) -> list[InputEvent]:
        """Everything that happened up to ``now_ms``; the facts to report, in order."""
        return [event for _, event in self.advance_timed(now_ms)]

    def advance_timed(self, now_ms: int) -> list[tuple[int, InputEvent]]:
        """Like ``advance`` with the time each fact happened (held-back facts keep theirs)."""
        if self._report_nodes and not self._reported_full:
            assert self.nodes is not None
            self._reported_full = True
            self._emit(now_ms, self.nodes.full_report(self.name))
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            t = heap[0][0]
            while heap and heap[0][0] == t:
                _, _, kind, key, token = heapq.heappop(heap)
                self._apply(t, kind, key, token)
            self._admit(t)
            self._report_changes(t)
        if not self._outbox or self._is_silent(now_ms):  # the common case first: nothing to say
            return []
        out, self._outbox = self._outbox, []
        # Requests (create/delete/evict) emit at their own time, which may precede events the
        # heap only processed now: deliver in time order (stable: same-time facts keep theirs).
        out.sort(key=_time_of)
        return out

    def heartbeat(self, now_ms: int) -> ClusterHeartbeat:
        """What the observer's cheap API call sees: unreachable while silent, else usage."""
        if self._is_silent(now_ms):
            return ClusterHeartbeat(cluster=self.name, reachable=False)
        return ClusterHeartbeat(cluster=self.name, reachable=True, usage=self.usage())

    def usage(self) -> Resources:
        """Resources held by admitted copies (limited or not), zero entries left out."""
        if self._usage is None:  # recomputed only after an admission or a release
            self._usage = {res: amount for res, amount in self._used.items() if amount}
        return dict(self._usage)

    # ------------------------------------------------------------------ fault injection

    def silence(self, until_ms: int | None, *, now_ms: int = 0) -> None:
        """Go silent until ``until_ms`` (None: for good, until ``recover``)."""
        del now_ms  # accepted for symmetry with the other calls; silence needs no start time
        self._silent = True
        self._silent_until = until_ms
        if until_ms is not None:
            self._schedule(until_ms, _UNSILENCE, None, 0)

    def recover(self) -> None:
        """End a silence now: requests reach the worker again and held-back facts flow."""
        self._silent = False
        self._silent_until = None

    def reject_next(self, n: int, *, reason: str = "RejectedByWorker") -> None:
        self._reject_next = n
        self._reject_reason = reason

    def fail_next(self, n: int) -> None:
        """The next ``n`` copies to finish report ``succeeded=False``."""
        self._fail_next = n

    def slow_admission(self, extra_ms: int, *, until_ms: int | None = None) -> None:
        """Copies created from now on (until ``until_ms``) wait ``extra_ms`` longer for admission."""
        self._slow_extra_ms = extra_ms
        self._slow_until = until_ms

    # ------------------------------------------------------------------ inspection

    def copies(self) -> list[CopyView]:
        """Every copy the worker holds, in creation order (dicts keep insertion order)."""
        return [_view(c) for c in self._copies.values()]

    def get(self, job_uid: str, attempt: int) -> CopyView | None:
        c = self._copies.get((job_uid, attempt))
        return None if c is None else _view(c)

    def is_silent(self, now_ms: int) -> bool:
        return self._is_silent(now_ms)

    # ------------------------------------------------------------------ internals

    def _is_silent(self, now_ms: int) -> bool:
        if self._silent and self._silent_until is not None and now_ms >= self._silent_until:
            self._silent = False
            self._silent_until = None
        return self._silent

    def _admission_delay(self, now_ms: int) -> int:
        extra = 0
        if self._slow_extra_ms and (self._slow_until is None or now_ms < self._slow_until):
            extra = self._slow_extra_ms
        return self.admission_latency_ms + extra

    def _emit(self, at_ms: int, event: InputEvent) -> None:
        self._outbox.append((at_ms, event))

    def _schedule(self, at_ms: int, kind: int, key: CopyKey | None, token: int) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at_ms, self._seq, kind, key, token))

    def _stale(self, item: tuple[int, int, int, CopyKey | None, int]) -> bool:
        key = item[3]
        if key is None:  # _UNSILENCE, _RELEASED: never cancelled
            return False
        copy = self._copies.get(key)
        return copy is None or copy.token != item[4]

    def _apply(self, t: int, kind: int, key: CopyKey | None, token: int) -> None:
        if kind == _UNSILENCE:
            self._is_silent(t)
            return
        if kind == _RELEASED:
            return  # the admission pass that follows every event time does the work
        assert key is not None
        copy = self._copies.get(key)
        if copy is None or copy.token != token:
            return
        if kind == _ELIGIBLE:
            copy.state = CopyState.PENDING
            shape = self._shape(copy)
            heapq.heappush(self._buckets.setdefault(shape, []), (copy.sort_key(), key))
            self._dirty.add(shape)
        elif kind == _FINISH:
            self._release(copy)
            copy.state = CopyState.FINISHED
            succeeded = self._fail_next <= 0
            if not succeeded:
                self._fail_next -= 1
            self._emit(
                t,
                RemoteFinished(
                    job=copy.job,
                    cluster=self.name,
                    attempt=copy.attempt,
                    succeeded=succeeded,
                    reason="" if succeeded else "JobFailed",
                ),
            )

    def _stop(self, copy: _Copy, now_ms: int) -> None:
        """Cancel whatever the copy was doing. A pending copy stays in its bucket and is skipped
        when it reaches the head (lazy removal); an admitted one releases its quota."""
        copy.token += 1
        if copy.state is CopyState.ADMITTED:
            self._release(copy)
            self._schedule(now_ms, _RELEASED, None, 0)

    def _report_changes(self, t: int) -> None:
        if self._report_nodes:
            assert self.nodes is not None
            report = self.nodes.changes(self.name)
            if report is not None:
                self._emit(t, report)

    def _release(self, copy: _Copy) -> None:
        if self.nodes is not None:
            self.nodes.release(copy.key)
        self._usage = None
        for res, amount in copy.demand.items():
            self._used[res] -= amount
            if res in self._free:
                self._free[res] += amount
        self._released = True

    def _shape(self, copy: _Copy) -> tuple[object, ...]:
        if self.nodes is not None:
            shape = node_shape(copy.pod_sets)
            self._shape_pods.setdefault(shape, copy.pod_sets)
            return shape
        return tuple(copy.demand.get(res, 0) for res in self._limited)

    def _fits(self, shape: tuple[object, ...], free: list[int]) -> bool:
        if self.nodes is not None:
            return self.nodes.fits(self._shape_pods[shape])
        return all(need <= have for need, have in zip(shape, free, strict=True))  # type: ignore[operator]

    def _head(self, shape: tuple[object, ...]) -> tuple[tuple[int, int, int], CopyKey] | None:
        bucket = self._buckets[shape]
        while bucket:
            head = bucket[0]
            copy = self._copies.get(head[1])
            if copy is not None and copy.state is CopyState.PENDING:
                return head
            heapq.heappop(bucket)
        del self._buckets[shape]
        self._shape_pods.pop(shape, None)
        return None

    def _admit(self, t: int) -> None:
        """One admission pass at time ``t``: repeatedly admit the first copy, in priority then FIFO
        order, that fits. That is what a sequential BestEffortFIFO scan admits, because a copy
        passed over does not fit later in the same pass either (free quota only shrinks).

        Pending copies are bucketed by shape (their demand of the limited resources): within a
        bucket, if the head does not fit, nothing behind it does, so one pass costs the number of
        shapes per admission, not the queue length. Without a release since the last pass only
        the buckets that got arrivals can have a new fit."""
        if self._released:
            shapes: Iterable[tuple[object, ...]] = list(self._buckets)
        else:
            shapes = list(self._dirty)
        self._released = False
        self._dirty.clear()
        candidates = [s for s in shapes if s in self._buckets]
        while candidates:
            best: tuple[tuple[int, int, int], CopyKey] | None = None
            best_shape: tuple[object, ...] = ()
            live: list[tuple[object, ...]] = []
            free = [self._free[res] for res in self._limited]
            for shape in candidates:
                head = self._head(shape)
                if head is None:
                    continue
                if self._fits(shape, free):
                    live.append(shape)
                    if best is None or head < best:
                        best, best_shape = head, shape
            if best is None:
                return
            heapq.heappop(self._buckets[best_shape])
            self._start(self._copies[best[1]], t)
            candidates = live

    def _start(self, copy: _Copy, t: int) -> None:
        if self.nodes is not None:
            # Fits (checked by ``_admit``); an adopted copy that does not is left unbound.
            self.nodes.place(copy.pod_sets, key=copy.key)
        self._usage = None
        for res, amount in copy.demand.items():
            self._used[res] = self._used.get(res, 0) + amount
            if res in self._free:
                self._free[res] -= amount
        copy.state = CopyState.ADMITTED
        copy.admitted_ms = t
        self._emit(t, RemoteAdmitted(job=copy.job, cluster=self.name, attempt=copy.attempt))
        self._schedule(t + copy.runtime_ms, _FINISH, copy.key, copy.token)
