"""One instance of every event type, with non-default values wherever a field has one."""

from __future__ import annotations

from eventlog import events as ev

JOB = ev.JobRef(
    namespace="team-a", name="train.v1", uid="uid-1", api_version="jobset.x-k8s.io/v1alpha2", kind="JobSet"
)
OTHER = ev.JobRef(namespace="team-b", name="small", uid="uid-2")
POD_SETS = [
    ev.PodSet(name="leader", count=1, requests={"cpu": 500, "memory": 2**30}),
    ev.PodSet(name="workers", count=4, requests={"cpu": 2000, "nvidia.com/gpu": 1}, min_count=2),
]
PLACEMENT = ev.Placement(
    cluster_selector={"region": "eu"},
    cluster_affinity=ev.ClusterAffinity(
        required=[
            ev.SelectorTerm(match_expressions=[ev.MatchExpression(key="gpu", operator="In", values=["a100"])])
        ],
        preferred=[
            ev.WeightedTerm(
                weight=30,
                term=ev.SelectorTerm(match_expressions=[ev.MatchExpression(key="zone", operator="Exists")]),
            )
        ],
    ),
    cluster_tolerations=[
        ev.Toleration(key="spot", operator="Exists", effect="NoSchedule", toleration_seconds=30)
    ],
    dispatch_mode="BestEffort",
    profile="gpu",
    nominate=2,
    cluster_names=["east", "west"],
    preemption_policy="Never",
)
PROFILE = ev.Profile(
    name="gpu",
    filters=[ev.FilterSpec(name="ClusterHealth"), ev.FilterSpec(name="ClusterHeadroom", args={"slack": 10})],
    scores=[ev.ScoreSpec(name="BinPack", weight=2, args={"resource": "nvidia.com/gpu"})],
    strategy=ev.StrategySpec(type="Incremental", step_size=2, k=3),
    round_timeout_ms=30_000,
    dispatch_mode="BestEffort",
)

INPUTS: list[ev.InputEvent] = [
    ev.JobSubmitted(
        job=JOB,
        pod_sets=POD_SETS,
        priority=100,
        priority_class="high",
        placement=PLACEMENT,
        queue="team-a-queue",
        suspended=True,
        runtime_ms=60_000,
        manifest={
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "train.v1"},
        },
        source="watch",
    ),
    ev.JobObserved(job=JOB, suspended=True, resource_version="42"),
    ev.JobUpdated(
        job=JOB,
        pod_sets=POD_SETS[:1],
        suspended=True,
        priority=5,
        priority_class="low",
        manifest={"a": [1, 2]},
    ),
    ev.JobDeleted(job=OTHER),
    ev.ClusterRegistered(
        cluster="east",
        labels={"region": "eu", "gpu": "a100"},
        taints=[ev.Taint(key="spot", effect="NoSchedule", value="true")],
        capacity={"cpu": 64_000, "nvidia.com/gpu": 8},
        worker_lost_timeout_ms=15_000,
    ),
    ev.ClusterUpdated(
        cluster="east", labels={"region": "us"}, taints=[], capacity={"cpu": 1}, worker_lost_timeout_ms=1
    ),
    ev.ClusterRemoved(cluster="west"),
    ev.ClusterHeartbeat(cluster="east", reachable=False, usage={"cpu": 12_000}),
    ev.ClusterCapacityReported(
        cluster="east",
        full=True,
        node_groups=[
            ev.NodeGroup(
                id="rack-1/a100",
                labels={"example.com/rack": "rack-1", "nvidia.com/gpu.product": "A100"},
                taints=[ev.Taint(key="nvidia.com/gpu", effect="NoSchedule")],
                bins=[ev.FreeBin(3, {"cpu": 32_000, "nvidia.com/gpu": 8}), ev.FreeBin(1, {"cpu": 4_000})],
            )
        ],
        topology_levels=["example.com/rack"],
        queues=[
            ev.WorkerQueueFact(
                name="team-a",
                cohort="all",
                flavors=[ev.FlavorFact(name="a100", resources={"nvidia.com/gpu": ev.QuotaFact(nominal=16, used=8)})],
            )
        ],
        local_queues={"team-a/default": "team-a"},
    ),
    ev.RemoteCreated(job=JOB, cluster="east", attempt=2),
    ev.RemoteAdmitted(job=JOB, cluster="east", attempt=2),
    ev.RemoteRejected(job=JOB, cluster="west", attempt=2, reason="quota"),
    ev.RemoteEvicted(job=JOB, cluster="east", attempt=2, reason="node drained"),
    ev.RemoteFinished(job=JOB, cluster="east", attempt=2, succeeded=False, reason="OOMKilled"),
    ev.RemoteGone(job=JOB, cluster="west", attempt=1),
    ev.Tick(),
    ev.PolicyLoaded(
        profiles=[PROFILE],
        priority_classes={"high": 1000},
        worker_lost_timeout_ms=1,
        claim_ttl_ms=2,
        requeue_backoff_ms=3,
    ),
    ev.QueuesConfigured(
        cluster_queues=[
            ev.ClusterQueueSpec(
                name="team-a",
                cohort="research",
                namespace_selector=ev.LabelSelector(match_labels={"team": "a"}),
                resource_groups=[
                    ev.ResourceGroup(
                        covered_resources=["cpu", "nvidia.com/gpu"],
                        flavors=[
                            ev.FlavorQuotas(
                                name="h100",
                                resources=[
                                    ev.ResourceQuota(name="cpu", nominal=64_000),
                                    ev.ResourceQuota(name="nvidia.com/gpu", nominal=8, borrowing_limit=8, lending_limit=4),
                                ],
                            )
                        ],
                    )
                ],
                weight_milli=2000,
                preemption=ev.QueuePreemption(reclaim_within_cohort="Any", within_cluster_queue="LowerPriority"),
                queueing_strategy="StrictFIFO",
                allowed_priority_classes=["low", "high"],
            )
        ],
        cohorts=[ev.CohortSpec(name="research", parent="all", weight_milli=500)],
        local_queues=[ev.LocalQueueSpec(namespace="team-a", name="default", cluster_queue="team-a")],
        priority_classes={"low": 10, "high": 1000},
        flavors=["h100"],
        namespaces={"team-a": {"team": "a"}},
        source="queues.yaml",
    ),
    ev.Rejected(inbox_seq=7, subject="kd.in.junk", reason="not JSON", raw="\u00ff garbage"),
]

DECISIONS: list[ev.DecisionEvent] = [
    ev.Nominated(job=JOB, clusters=["east", "west"], attempt=2, round=1, deadline_ms=1_700_000_060_000),
    ev.Placed(job=JOB, cluster="east", attempt=2),
    ev.Withdrawn(job=JOB, cluster="west", attempt=2, reason="placed elsewhere"),
    ev.Unschedulable(
        job=OTHER, reasons={"ClusterSelector": 2, "ClusterHeadroom": 1}, message="no cluster fits"
    ),
    ev.Requeued(job=JOB, reason="WorkerLost", cluster="east", not_before_ms=5, message="east lost"),
    ev.ClusterLost(cluster="east", last_seen_ms=1_700_000_000_000),
    ev.ClusterRecovered(cluster="east"),
    ev.PreemptionClaimed(preemptor=JOB, cluster="east", victims=[OTHER], expires_ms=9, claim={"cpu": 2000}),
    ev.Evict(job=OTHER, cluster="east", attempt=1, preemptor=JOB, reason="Preempted"),
    ev.ClaimExpired(preemptor=JOB, cluster="east"),
    ev.Finished(job=JOB, cluster="east", attempt=2, succeeded=False),
    ev.CleanUp(job=JOB, cluster="west", attempt=1),
]

# What a producer may publish to the inbox (Rejected is made by the sequencer only).
PUBLISHABLE: list[ev.InputEvent] = [e for e in INPUTS if not isinstance(e, ev.Rejected)]
