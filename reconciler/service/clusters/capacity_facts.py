"""What a worker can really run, as ``ClusterCapacityReported`` facts (docs/capacity-reports.md).

``WorkerState`` follows a worker's Nodes, Pods, Kueue ClusterQueues, LocalQueues and Topologies
(one object at a time, as the list/watch loop hands them over) and can say, at any moment, what
the worker looks like: its node groups (nodes with the same relevant labels and taints) each with
a histogram of free capacity, its ClusterQueues and its LocalQueues. It keeps the per-node work
incremental: a pod event marks one node dirty, and only dirty nodes are recomputed when a report
is built, so a 5,000-node worker costs a few dirty nodes per report, not 5,000.

``ReportDiffer`` turns successive states into facts: a full report first (and after a reconnect),
then only the groups and queues that changed, at most one report per ``min_interval_ms``.

Rounding: free capacity is rounded DOWN to ``STEPS`` (cpu 100m, memory and ephemeral storage
256Mi, anything else 1 unit), so a fit found on a bin is a real fit, and small request changes
(a 10m sidecar) do not change the histogram. A resource a bin does not list has none free.
Pure apart from the caller's clock: nothing here does I/O.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from eventlog import codec
from eventlog import events as ev
from eventlog.kube.quantity import parse_resources, to_units
from reconciler.service.clusters.usage import pod_requests

HOSTNAME = "kubernetes.io/hostname"
GPU_PRODUCT = "nvidia.com/gpu.product"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
DEFAULT_LEVELS: tuple[str, ...] = ("topology.kubernetes.io/region", "topology.kubernetes.io/zone")
"""Topology levels when the worker has no Kueue ``Topology`` object."""

MI = 1024 * 1024
STEPS: Mapping[str, int] = {"cpu": 100, "memory": 256 * MI, "ephemeral-storage": 256 * MI}
IGNORED: frozenset[str] = frozenset({"pods"})
"""Allocatable entries not reported: every node has room for ~110 pods; a batch pod never hits it."""

FINISHED = ("Succeeded", "Failed")
FIT_EFFECTS = ("NoSchedule", "NoExecute")  # PreferNoSchedule never keeps a pod off a node

FreeKey = tuple[tuple[str, int], ...]  # a rounded free vector, sorted, zeros left out


SIGNIFICANT_BITS = 3
"""Free amounts keep their 3 leading binary digits (in steps): 0-7 steps exactly, then 8, 10, 12,
14, 16, 20, 24, 28, 32, ... steps (four values per doubling, each at most 25% below the truth)."""


def coarse(units: int, bits: int = SIGNIFICANT_BITS) -> int:
    """``units`` rounded down to ``bits`` significant binary digits."""
    shift = units.bit_length() - bits
    return units if shift <= 0 else (units >> shift) << shift


def round_down(free: Mapping[str, int], steps: Mapping[str, int] = STEPS, *, bits: int = SIGNIFICANT_BITS) -> FreeKey:
    out = []
    for name in sorted(free):
        if name in IGNORED:
            continue
        step = steps.get(name, 1)
        value = coarse(max(free[name], 0) // step, bits) * step
        if value > 0:
            out.append((name, value))
    return tuple(out)


def node_taints(node: Mapping[str, Any]) -> tuple[ev.Taint, ...]:
    out = []
    for t in (node.get("spec") or {}).get("taints") or []:
        if t.get("effect") in FIT_EFFECTS and t.get("key"):
            out.append(ev.Taint(key=str(t["key"]), effect=t["effect"], value=str(t.get("value") or "")))
    return tuple(sorted(out, key=lambda t: (t.key, t.effect, t.value)))


def group_id(labels: Mapping[str, str], taints: Iterable[ev.Taint]) -> str:
    """Stable across reports and replicas: a digest of what defines the group."""
    raw = codec.encode({"l": dict(sorted(labels.items())), "t": [[t.key, t.effect, t.value] for t in taints]})
    return hashlib.sha256(raw).hexdigest()[:12]


def topology_levels(topologies: Iterable[Mapping[str, Any]]) -> list[str]:
    """The node labels of Kueue ``Topology`` objects' levels, widest first (several objects:
    the first's order, then levels only later ones name)."""
    out: list[str] = []
    for topo in sorted(topologies, key=lambda t: str((t.get("metadata") or {}).get("name", ""))):
        for level in (topo.get("spec") or {}).get("levels") or []:
            label = level.get("nodeLabel") if isinstance(level, dict) else None
            if label and label not in out:
                out.append(str(label))
    return out


def _limit(raw: Any, resource: str) -> int | None:
    return None if raw is None else to_units(resource, raw)


def queue_fact(cq: Mapping[str, Any]) -> ev.WorkerQueueFact:
    """A Kueue ClusterQueue (v1beta1 or v1beta2) as the core reads it: flavors in the order Kueue
    tries them, resource group after resource group (the core tells the groups apart by the
    resources their flavors list, as Kueue requires them to)."""
    spec = cq.get("spec") or {}
    status = cq.get("status") or {}
    used: dict[tuple[str, str], int] = {}
    for flavor in status.get("flavorsReservation") or status.get("flavorsUsage") or []:
        for res in flavor.get("resources") or []:
            name = str(res.get("name"))
            used[(str(flavor.get("name")), name)] = to_units(name, res.get("total", 0))
    flavors = []
    for group in spec.get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            fname = str(flavor.get("name"))
            resources = {}
            for res in flavor.get("resources") or []:
                name = str(res.get("name"))
                resources[name] = ev.QuotaFact(
                    nominal=to_units(name, res.get("nominalQuota", 0)),
                    borrowing_limit=_limit(res.get("borrowingLimit"), name),
                    lending_limit=_limit(res.get("lendingLimit"), name),
                    used=used.get((fname, name), 0),
                )
            flavors.append(ev.FlavorFact(name=fname, resources=resources))
    cohort = spec.get("cohort") or spec.get("cohortName")
    stop = spec.get("stopPolicy")
    return ev.WorkerQueueFact(
        name=str((cq.get("metadata") or {}).get("name", "")),
        cohort=str(cohort) if cohort else None,
        flavors=flavors,
        stopped=stop not in (None, "None"),
    )


@dataclass
class _Node:
    labels: dict[str, str]
    taints: tuple[ev.Taint, ...]
    allocatable: ev.Resources
    schedulable: bool


@dataclass
class WorkerState:
    """One worker's objects as far as capacity goes, kept up to date event by event."""

    extra_labels: tuple[str, ...] = ()
    """Node labels the operator wants pods to be able to select on, besides the built-in ones."""
    default_levels: tuple[str, ...] = DEFAULT_LEVELS
    steps: Mapping[str, int] = field(default_factory=lambda: dict(STEPS))
    bits: int = SIGNIFICANT_BITS

    _nodes: dict[str, _Node] = field(default_factory=dict)
    _pods: dict[str, tuple[str, ev.Resources]] = field(default_factory=dict)  # key -> (node, requests)
    _used: dict[str, ev.Resources] = field(default_factory=dict)  # node -> requests of its pods
    _counted: dict[str, tuple[str, FreeKey, FreeKey]] = field(default_factory=dict)  # node -> (group, free, allocatable)
    _bins: dict[str, Counter[FreeKey]] = field(default_factory=dict)
    _allocatable: dict[str, Counter[FreeKey]] = field(default_factory=dict)  # group -> its nodes' allocatable
    _groups: dict[str, tuple[dict[str, str], tuple[ev.Taint, ...]]] = field(default_factory=dict)
    _dirty: set[str] = field(default_factory=set)
    _topologies: dict[str, dict[str, Any]] = field(default_factory=dict)
    _levels: list[str] = field(default_factory=list)
    queues: dict[str, ev.WorkerQueueFact] = field(default_factory=dict)
    local_queues: dict[str, str] = field(default_factory=dict)
    changed: bool = False
    """Set by every event that may change a report; the reporter clears it."""
    kueue: bool = False
    """Does the worker run Kueue? Without, no queue facts are reported at all: the core reads any
    LocalQueue map (even an empty one) as "this worker admits through Kueue"."""

    def __post_init__(self) -> None:
        self._levels = list(self.default_levels)

    # -- events ---------------------------------------------------------------------------------

    def on_node(self, type_: str, node: dict[str, Any]) -> None:
        meta = node.get("metadata") or {}
        name = str(meta.get("name", ""))
        if type_ == "DELETED":
            self._nodes.pop(name, None)
        else:
            self._nodes[name] = _Node(
                labels=dict(meta.get("labels") or {}),
                taints=node_taints(node),
                allocatable=parse_resources((node.get("status") or {}).get("allocatable")),
                schedulable=not (node.get("spec") or {}).get("unschedulable"),
            )
        self._dirty.add(name)
        self.changed = True

    def on_pod(self, type_: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        holds = type_ != "DELETED" and bool(node) and (pod.get("status") or {}).get("phase") not in FINISHED
        old = self._pods.pop(key, None)
        if old is not None:
            self._add_used(old[0], old[1], sign=-1)
        if holds:
            requests = pod_requests(pod)
            self._pods[key] = (node, requests)
            self._add_used(node, requests, sign=1)
        if old is not None or holds:
            self.changed = True

    def _add_used(self, node: str, requests: ev.Resources, *, sign: int) -> None:
        used = self._used.setdefault(node, {})
        for name, amount in requests.items():
            used[name] = used.get(name, 0) + sign * amount
        if not any(used.values()):
            del self._used[node]
        self._dirty.add(node)

    def on_cluster_queue(self, type_: str, cq: dict[str, Any]) -> None:
        name = str((cq.get("metadata") or {}).get("name", ""))
        if type_ == "DELETED":
            self.queues.pop(name, None)
        else:
            self.queues[name] = queue_fact(cq)
        self.changed = True

    def on_local_queue(self, type_: str, lq: dict[str, Any]) -> None:
        meta = lq.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        cq = (lq.get("spec") or {}).get("clusterQueue")
        if type_ == "DELETED" or not cq:
            self.local_queues.pop(key, None)
        else:
            self.local_queues[key] = str(cq)
        self.changed = True

    def on_topology(self, type_: str, topo: dict[str, Any]) -> None:
        name = str((topo.get("metadata") or {}).get("name", ""))
        if type_ == "DELETED":
            self._topologies.pop(name, None)
        else:
            self._topologies[name] = topo
        levels = topology_levels(self._topologies.values()) or list(self.default_levels)
        if levels != self._levels:
            self._levels = levels
            self._dirty.update(self._nodes)  # every node's group may change
            self.changed = True

    # -- the state, as facts --------------------------------------------------------------------

    @property
    def levels(self) -> list[str]:
        return list(self._levels)

    def grouping_labels(self) -> list[str]:
        keys = [lvl for lvl in self._levels if lvl != HOSTNAME]  # the host level is a bin row itself
        for extra in (GPU_PRODUCT, INSTANCE_TYPE, *self.extra_labels):
            if extra not in keys:
                keys.append(extra)
        return keys

    def node_groups(self) -> dict[str, ev.NodeGroup]:
        """Every group of schedulable nodes with its free-capacity histogram, by id."""
        self._settle()
        out = {}
        for gid, counts in self._bins.items():
            labels, taints = self._groups[gid]
            bins = [ev.FreeBin(count=n, free=dict(key)) for key, n in sorted(counts.items()) if n > 0]
            # The most one node of the group holds when empty, per resource: never below what a
            # node really holds, so "no node could ever hold it" is only said when true.
            allocatable: ev.Resources = {}
            for key in self._allocatable[gid]:
                for name, amount in key:
                    allocatable[name] = max(allocatable.get(name, 0), amount)
            out[gid] = ev.NodeGroup(
                id=gid, labels=labels, taints=list(taints), bins=bins, allocatable=dict(sorted(allocatable.items()))
            )
        return out

    def _settle(self) -> None:
        """Recompute the dirty nodes' place in the histograms."""
        if not self._dirty:
            return
        keys = self.grouping_labels()
        for name in self._dirty:
            before = self._counted.pop(name, None)
            if before is not None:
                self._uncount(*before)
            node = self._nodes.get(name)
            if node is None or not node.schedulable:
                continue  # gone or cordoned: not offered to anyone
            labels = {k: node.labels[k] for k in keys if k in node.labels}
            gid = group_id(labels, node.taints)
            self._groups.setdefault(gid, (labels, node.taints))
            used = self._used.get(name, {})
            free = round_down({r: a - used.get(r, 0) for r, a in node.allocatable.items()}, self.steps, bits=self.bits)
            self._bins.setdefault(gid, Counter())[free] += 1
            alloc = tuple((r, a) for r, a in sorted(node.allocatable.items()) if r not in IGNORED and a > 0)
            self._allocatable.setdefault(gid, Counter())[alloc] += 1
            self._counted[name] = (gid, free, alloc)
        self._dirty.clear()

    def _uncount(self, gid: str, free: FreeKey, alloc: FreeKey) -> None:
        for counts, key in ((self._bins[gid], free), (self._allocatable[gid], alloc)):
            counts[key] -= 1
            if counts[key] <= 0:
                del counts[key]
        if not self._bins[gid]:
            del self._bins[gid], self._allocatable[gid], self._groups[gid]


@dataclass
class ReportDiffer:
    """Which ``ClusterCapacityReported`` to publish next for one worker, and under which id.

    The first report, and the first after ``reset`` (a reconnect), is full; then only what changed
    since the last report: groups whose bins changed (a vanished group with ``bins=[]``), queues
    that changed or went (``queues_removed``), and LocalQueues / topology levels when they changed.
    At most one report per ``min_interval_ms``; the caller asks again when that has passed.

    Message ids chain the previous report's digest with this one's, so two replicas that saw the
    same sequence publish the same ids (the inbox keeps one), while a change back to an earlier
    state (A, B, A) is a new id and not dropped as a duplicate.
    """

    cluster: str
    min_interval_ms: int = 5_000
    _groups: dict[str, ev.NodeGroup] = field(default_factory=dict)
    _queues: dict[str, ev.WorkerQueueFact] = field(default_factory=dict)
    _local_queues: dict[str, str] | None = None
    _levels: list[str] | None = None
    _full: bool = True
    _last_ms: int | None = None
    _chain: str = "-"
    reports: int = 0
    bytes: int = 0

    @property
    def pending_full(self) -> bool:
        return self._full

    def reset(self) -> None:
        """The next report is full (after a reconnect, or when the log may have missed some)."""
        self._full = True

    def wait_ms(self, now_ms: int) -> int:
        """How long before a report may be sent (0: now)."""
        if self._last_ms is None:
            return 0
        return max(0, self._last_ms + self.min_interval_ms - now_ms)

    def next_report(self, state: WorkerState, now_ms: int) -> tuple[ev.ClusterCapacityReported, str] | None:
        """The report to publish now, or None (nothing changed, or too soon: see ``wait_ms``)."""
        if self.wait_ms(now_ms) > 0:
            return None
        groups = state.node_groups()
        levels = state.levels
        if self._full:
            event = ev.ClusterCapacityReported(
                cluster=self.cluster,
                full=True,
                node_groups=[groups[g] for g in sorted(groups)],
                topology_levels=levels,
                queues=[state.queues[q] for q in sorted(state.queues)],
                local_queues=dict(sorted(state.local_queues.items())) if state.kueue else None,
            )
        else:
            changed = [groups[g] for g in sorted(groups) if self._groups.get(g) != groups[g]]
            gone = [ev.NodeGroup(id=g) for g in sorted(self._groups) if g not in groups]  # no bins: gone
            queues = [state.queues[q] for q in sorted(state.queues) if self._queues.get(q) != state.queues[q]]
            removed = sorted(q for q in self._queues if q not in state.queues)
            lqs = state.local_queues if state.kueue and state.local_queues != self._local_queues else None
            event = ev.ClusterCapacityReported(
                cluster=self.cluster,
                node_groups=changed + gone,
                topology_levels=levels if levels != self._levels else None,
                queues=queues,
                queues_removed=removed,
                local_queues=dict(sorted(lqs.items())) if lqs is not None else None,
            )
            if not (event.node_groups or event.queues or event.queues_removed) and (
                event.local_queues is None and event.topology_levels is None
            ):
                return None
        self._groups, self._queues = groups, dict(state.queues)
        self._local_queues, self._levels = dict(state.local_queues), levels
        raw = codec.encode(event)
        digest = hashlib.sha256(self._chain.encode() + raw).hexdigest()[:16]
        kind = "full" if self._full else "delta"
        msg_id = f"cap/{self.cluster}/{kind}/{self._chain}-{digest}"
        if self._full and self._chain == "-":
            # A restarted observer starts its chain again: the window keeps a full report sent just
            # before the restart from shadowing this one (a later delta may have changed things).
            msg_id += f"/{now_ms // max(self.min_interval_ms, 1)}"
        self._chain, self._full, self._last_ms = digest, False, now_ms
        self.reports += 1
        self.bytes += len(raw)
        return event, msg_id
