"""Builders for tenancy tests: queue configs (three teams in a cohort), team jobs, lookups."""

from __future__ import annotations

from eventlog import events as ev
from reconciler.core import State

GPU = "nvidia.com/gpu"
TEAMS = ["team-a", "team-b", "team-c"]


def quota(
    gpu: int,
    *,
    cpu: int = 1_000_000,
    borrowing_limit: int | None = None,
    lending_limit: int | None = None,
    flavor: str = "default",
) -> list[ev.ResourceGroup]:
    return [
        ev.ResourceGroup(
            covered_resources=["cpu", GPU],
            flavors=[
                ev.FlavorQuotas(
                    name=flavor,
                    resources=[
                        ev.ResourceQuota(name="cpu", nominal=cpu),
                        ev.ResourceQuota(
                            name=GPU, nominal=gpu, borrowing_limit=borrowing_limit, lending_limit=lending_limit
                        ),
                    ],
                )
            ],
        )
    ]


def cq(
    name: str,
    *,
    gpu: int = 8,
    cohort: str | None = "research",
    weight_milli: int = 1000,
    borrowing_limit: int | None = None,
    lending_limit: int | None = None,
    strategy: ev.QueueingStrategy = "BestEffortFIFO",
    stop: ev.StopPolicy = "None",
    preemption: ev.QueuePreemption | None = None,
) -> ev.ClusterQueueSpec:
    return ev.ClusterQueueSpec(
        name=name,
        cohort=cohort,
        namespace_selector=ev.LabelSelector(),
        resource_groups=quota(gpu, borrowing_limit=borrowing_limit, lending_limit=lending_limit),
        weight_milli=weight_milli,
        preemption=preemption or ev.QueuePreemption(),
        queueing_strategy=strategy,
        stop_policy=stop,
    )


def config(*queues: ev.ClusterQueueSpec) -> ev.QueuesConfigured:
    """Each queue's namespace (its name) has a LocalQueue "default" pointing at it."""
    return ev.QueuesConfigured(
        cluster_queues=list(queues),
        local_queues=[ev.LocalQueueSpec(namespace=q.name, name="default", cluster_queue=q.name) for q in queues],
        flavors=["default"],
        source="test",
    )


def three_teams(**per_team: dict[str, object]) -> ev.QueuesConfigured:
    return config(*(cq(t, **per_team.get(t.replace("-", "_"), {})) for t in TEAMS))  # type: ignore[arg-type]


def team_job(
    team: str, name: str, *, gpu: int = 1, cpu: int = 1000, priority: int = 0, cluster_queue: str | None = None
) -> ev.JobSubmitted:
    requests = {"cpu": cpu} | ({GPU: gpu} if gpu else {})
    return ev.JobSubmitted(
        job=ev.JobRef(namespace=team, name=name, uid=f"uid-{team}-{name}"),
        pod_sets=[ev.PodSet(name="main", count=1, requests=requests)],
        priority=priority,
        cluster_queue=cluster_queue,
    )


def gpu_cluster(name: str, gpu: int = 8) -> ev.ClusterRegistered:
    return ev.ClusterRegistered(cluster=name, capacity={"cpu": 1_000_000, GPU: gpu, "memory": 1 << 40})


def usage(state: State, queue: str, resource: str = GPU, flavor: str = "default") -> int:
    assert state.tree is not None and state.usage is not None
    return state.usage.usage[state.tree.queue[queue]][state.tree.column[(flavor, resource)]]
