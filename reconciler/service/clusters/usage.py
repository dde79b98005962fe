"""A worker's capacity and usage, from Kueue ClusterQueues or, without Kueue, nodes and pods."""

from __future__ import annotations

from typing import Any

from eventlog.events import Resources
from eventlog.kube.quantity import parse_resources, to_units


def from_cluster_queues(queues: list[dict[str, Any]]) -> tuple[Resources, Resources]:
    """(capacity, usage): nominal quotas summed over every ClusterQueue and flavor, and what
    they have reserved (``status.flavorsReservation``, else ``flavorsUsage``)."""
    capacity: Resources = {}
    usage: Resources = {}
    for cq in queues:
        for group in (cq.get("spec") or {}).get("resourceGroups") or []:
            for flavor in group.get("flavors") or []:
                for res in flavor.get("resources") or []:
                    name = str(res.get("name"))
                    add_into(capacity, {name: to_units(name, res.get("nominalQuota", 0))})
        status = cq.get("status") or {}
        for flavor in status.get("flavorsReservation") or status.get("flavorsUsage") or []:
            for res in flavor.get("resources") or []:
                name = str(res.get("name"))
                add_into(usage, {name: to_units(name, res.get("total", 0))})
    return capacity, usage


def pod_requests(pod: dict[str, Any]) -> Resources:
    """The usual rule: sum of containers, max with each init container; limits stand in for
    missing requests; plus pod overhead."""
    spec = pod.get("spec") or {}

    def of(container: dict[str, Any]) -> Resources:
        res = container.get("resources") or {}
        merged = dict(res.get("limits") or {})
        merged.update(res.get("requests") or {})
        return parse_resources(merged)

    total: Resources = {}
    for c in spec.get("containers") or []:
        add_into(total, of(c))
    for c in spec.get("initContainers") or []:
        for name, amount in of(c).items():
            total[name] = max(total.get(name, 0), amount)
    add_into(total, parse_resources(spec.get("overhead")))
    return total


def add_into(total: Resources, more: Resources) -> None:
    for name, amount in more.items():
        total[name] = total.get(name, 0) + amount


def from_nodes_and_pods(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]]
) -> tuple[Resources, Resources]:
    """(capacity, usage): allocatable of schedulable nodes, and the requests of pods that hold
    resources (not finished)."""
    capacity: Resources = {}
    for node in nodes:
        if (node.get("spec") or {}).get("unschedulable"):
            continue
        add_into(capacity, parse_resources((node.get("status") or {}).get("allocatable")))
    usage: Resources = {}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if not (pod.get("spec") or {}).get("nodeName"):
            continue
        add_into(usage, pod_requests(pod))
    return capacity, usage
