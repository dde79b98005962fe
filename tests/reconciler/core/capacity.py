"""Builders for capacity-fact tests: node groups, worker queues, jobs with pod sets."""

from __future__ import annotations

from eventlog import events as ev

GPU = "nvidia.com/gpu"


def bins(*rows: tuple[int, dict[str, int]]) -> list[ev.FreeBin]:
    return [ev.FreeBin(count=count, free=free) for count, free in rows]


def group(
    gid: str,
    *rows: tuple[int, dict[str, int]],
    labels: dict[str, str] | None = None,
    taints: list[ev.Taint] | None = None,
) -> ev.NodeGroup:
    return ev.NodeGroup(id=gid, labels=labels or {}, taints=taints or [], bins=bins(*rows))


def report(
    cluster: str, *groups: ev.NodeGroup, full: bool = True, **kw: object
) -> ev.ClusterCapacityReported:
    return ev.ClusterCapacityReported(cluster=cluster, full=full, node_groups=list(groups), **kw)  # type: ignore[arg-type]


def gang(name: str, *sets: ev.PodSet, namespace: str = "team", queue: str | None = None) -> ev.JobSubmitted:
    return ev.JobSubmitted(
        job=ev.JobRef(namespace=namespace, name=name, uid=f"uid-{namespace}-{name}"),
        pod_sets=list(sets),
        queue=queue,
    )


def pods(name: str, count: int, *, min_count: int | None = None, **requests: int) -> ev.PodSet:
    req = {GPU if k == "gpu" else k: v for k, v in requests.items()}
    return ev.PodSet(name=name, count=count, min_count=min_count, requests=req)
