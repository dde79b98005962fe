"""The event contract: every fact and decision kdispatch records, as one tagged union.

Rules (see docs/schema-evolution in msgspec):
- a field's type never changes; fields added later get a default;
- every event is frozen and carries ``v`` (schema version of that event type);
- facts are named in the past tense (``JobSubmitted``), decisions as what was decided
  (``Nominated``, ``Placed``);
- ``gc=False`` on every struct: events and log entries are plain trees (no reference cycles), so
  the garbage collector need not track them; replay decodes millions and GC tracking halved its
  speed (bench/log_replay.py);
- quantities are integers: CPU in millicores, memory and everything else in units
  (``Quantity.Value()`` rounded up); time is integer milliseconds since the epoch.

This module imports nothing of ours and does no I/O.
"""

from __future__ import annotations

from typing import Any, Literal

from msgspec import Struct, field

SCHEMA_VERSION = 1

# ----------------------------------------------------------------------------------------------
# Value types shared by events
# ----------------------------------------------------------------------------------------------

Resources = dict[str, int]
"""Resource name -> integer amount (cpu in millicores, memory in bytes, GPUs in units)."""


class JobRef(Struct, frozen=True, omit_defaults=True, gc=False):
    """Which job on the manager cluster. ``uid`` is the manager object's uid."""

    namespace: str
    name: str
    uid: str
    api_version: str = "batch/v1"
    kind: str = "Job"

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class TopologyRequest(Struct, frozen=True, omit_defaults=True, gc=False):
    """Kueue TAS on a pod set: a node label key naming a topology level (e.g. a rack label),
    from ``kueue.x-k8s.io/podset-required-topology`` / ``podset-preferred-topology``."""

    required: str | None = None  # all pods of the set in one domain of this level, or not there
    preferred: str | None = None  # one domain of this level if one can hold it (scored)


class PodSet(Struct, frozen=True, omit_defaults=True, gc=False):
    """One group of identical pods; the whole gang (all pod sets) lands on one cluster."""

    name: str
    count: int
    requests: Resources = field(default_factory=dict)  # per pod
    # Fewest pods the set can start with (Kueue partial admission, or a Workload API PodGroup's
    # ``minCount``); None = all ``count``.
    min_count: int | None = None
    # What the pods ask of the nodes they land on (pod template's nodeSelector, required node
    # affinity as an OR of terms, tolerations): counted against the workers' node groups.
    node_selector: dict[str, str] = field(default_factory=dict)
    node_affinity: list[SelectorTerm] = field(default_factory=list)
    tolerations: list[Toleration] = field(default_factory=list)
    topology: TopologyRequest | None = None
    group: str | None = None  # the Workload API PodGroup this set is, when the job declared one


class MatchExpression(Struct, frozen=True, omit_defaults=True, gc=False):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] = field(default_factory=list)


class SelectorTerm(Struct, frozen=True, omit_defaults=True, gc=False):
    """An AND of match expressions."""

    match_expressions: list[MatchExpression] = field(default_factory=list)


class WeightedTerm(Struct, frozen=True, omit_defaults=True, gc=False):
    weight: int  # 1..100
    term: SelectorTerm


class ClusterAffinity(Struct, frozen=True, omit_defaults=True, gc=False):
    required: list[SelectorTerm] = field(default_factory=list)  # OR of terms; empty = no constraint
    preferred: list[WeightedTerm] = field(default_factory=list)


class Taint(Struct, frozen=True, omit_defaults=True, gc=False):
    key: str
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
    value: str = ""


class Toleration(Struct, frozen=True, omit_defaults=True, gc=False):
    key: str = ""  # empty key with Exists tolerates everything
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""  # empty = all effects
    toleration_seconds: int | None = None


DispatchMode = Literal["MustBeAdmitted", "BestEffort"]
PreemptionPolicy = Literal["PreemptLowerPriority", "Never"]


class Placement(Struct, frozen=True, omit_defaults=True, gc=False):
    """The normalized placement spec (the ``kdispatch.io/placement`` annotation, defaults filled)."""

    cluster_selector: dict[str, str] = field(default_factory=dict)
    cluster_affinity: ClusterAffinity = field(default_factory=ClusterAffinity)
    cluster_tolerations: list[Toleration] = field(default_factory=list)
    dispatch_mode: DispatchMode = "MustBeAdmitted"
    profile: str = "default"
    nominate: int | None = None  # K for TopK, overrides the profile's k
    cluster_names: list[str] = field(default_factory=list)  # pin: only these clusters
    preemption_policy: PreemptionPolicy = "PreemptLowerPriority"


class FilterSpec(Struct, frozen=True, omit_defaults=True, gc=False):
    name: str
    args: dict[str, Any] = field(default_factory=dict)


class ScoreSpec(Struct, frozen=True, omit_defaults=True, gc=False):
    name: str
    weight: int = 1
    args: dict[str, Any] = field(default_factory=dict)


NominatedHold = Literal["all", "none", "best"]


class StrategySpec(Struct, frozen=True, omit_defaults=True, gc=False):
    type: Literal["AllAtOnce", "Incremental", "TopK"] = "TopK"
    step_size: int = 1  # Incremental
    k: int = 1  # TopK
    # What a copy holds while nominated and not yet admitted: its job's whole demand on every
    # nominated cluster ("all"), on the best-ranked one only ("best"), or nowhere ("none", as
    # MultiKueue's copies wait in the workers' queues). Absent (None) means "all": that is what
    # every log written before the field existed did, so old logs replay as they were decided.
    # The config decoder and the built-in profiles write the value explicitly
    # (``reconciler.config.default_nominated_hold``: "none" for AllAtOnce, else "all").
    nominated_hold: NominatedHold | None = None


class Profile(Struct, frozen=True, omit_defaults=True, gc=False):
    """A dispatch policy. Plugins are referred to by registered name."""

    name: str
    filters: list[FilterSpec] = field(default_factory=list)
    scores: list[ScoreSpec] = field(default_factory=list)
    strategy: StrategySpec = field(default_factory=StrategySpec)
    round_timeout_ms: int = 60_000
    dispatch_mode: DispatchMode = "MustBeAdmitted"


# ----------------------------------------------------------------------------------------------
# The union. Every event carries `v`; the tag is the class name, in field "type".
# ----------------------------------------------------------------------------------------------


class Event(Struct, frozen=True, tag_field="type", tag=True, kw_only=True, gc=False):
    v: int = SCHEMA_VERSION


# ---- inputs: the manager cluster (webhook, manager watcher) --------------------------------


class JobSubmitted(Event, frozen=True, kw_only=True):
    job: JobRef
    pod_sets: list[PodSet]
    priority: int = 0
    priority_class: str | None = None  # resolved through the policy's priority classes if set
    placement: Placement = field(default_factory=Placement)
    queue: str | None = None  # kueue.x-k8s.io/queue-name
    suspended: bool = False  # the user asked for it suspended (kdispatch holds it anyway)
    runtime_ms: int | None = None  # hint for simulated clusters (kdispatch.io/simulated-runtime)
    manifest: dict[str, Any] | None = None  # the object as admitted, for the remote copy
    source: Literal["webhook", "watch"] = "webhook"
    # Resolved by the webhook from ``queue`` (the LocalQueue) in the job's namespace; None in logs
    # written without tenancy, where every job is in the one default queue.
    cluster_queue: str | None = None


class JobObserved(Event, frozen=True, kw_only=True):
    """The manager watcher saw the job (list/resync); lets the core notice missing submissions."""

    job: JobRef
    suspended: bool = False
    resource_version: str = ""


class JobUpdated(Event, frozen=True, kw_only=True):
    """Spec drift or suspend/resume on the manager object."""

    job: JobRef
    pod_sets: list[PodSet]
    suspended: bool = False
    priority: int | None = None
    priority_class: str | None = None
    manifest: dict[str, Any] | None = None


class JobDeleted(Event, frozen=True, kw_only=True):
    job: JobRef


# ---- inputs: clusters (adapters, simulated clusters) ----------------------------------------


class ClusterRegistered(Event, frozen=True, kw_only=True):
    cluster: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[Taint] = field(default_factory=list)
    capacity: Resources = field(default_factory=dict)
    worker_lost_timeout_ms: int | None = None  # per-cluster override of the policy default


class ClusterUpdated(Event, frozen=True, kw_only=True):
    cluster: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[Taint] = field(default_factory=list)
    capacity: Resources = field(default_factory=dict)
    worker_lost_timeout_ms: int | None = None


class ClusterRemoved(Event, frozen=True, kw_only=True):
    cluster: str


class ClusterHeartbeat(Event, frozen=True, kw_only=True):
    cluster: str
    reachable: bool = True
    usage: Resources = field(default_factory=dict)  # what the worker reports in use (all tenants)


class FreeBin(Struct, frozen=True, array_like=True, gc=False):
    """``count`` nodes with at least ``free`` left (the reporter rounds down, so fits it finds
    are real)."""

    count: int
    free: Resources


class NodeGroup(Struct, frozen=True, omit_defaults=True, gc=False):
    """Nodes of one worker that look the same to a pod's selector and tolerations and sit in the
    same topology domain, with a histogram of their free capacity."""

    id: str  # stable key the reporter derives from (labels, taints)
    labels: dict[str, str] = field(default_factory=dict)  # the labels that matter (topology, GPU model, ...)
    taints: list[Taint] = field(default_factory=list)
    bins: list[FreeBin] = field(default_factory=list)  # empty: the group has no node any more
    # What one node of the group holds when empty (its allocatable; the largest in the group).
    # Optional: with it, a pod no node could ever hold is told apart from one that waits for
    # room (preemption is not tried for the first). Empty = unknown.
    allocatable: Resources = field(default_factory=dict)


class QuotaFact(Struct, frozen=True, omit_defaults=True, gc=False):
    """One resource of one flavor of a worker's ClusterQueue (integers as in ``Resources``)."""

    nominal: int = 0
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    used: int = 0  # reserved by admitted workloads (status.flavorsReservation)


class FlavorFact(Struct, frozen=True, omit_defaults=True, gc=False):
    name: str
    resources: dict[str, QuotaFact] = field(default_factory=dict)


class WorkerQueueFact(Struct, frozen=True, omit_defaults=True, gc=False):
    """A ClusterQueue on a worker, flavors in the order Kueue tries them."""

    name: str
    cohort: str | None = None
    flavors: list[FlavorFact] = field(default_factory=list)
    stopped: bool = False  # spec.stopPolicy other than None: admits nothing


class ClusterCapacityReported(Event, frozen=True, kw_only=True):
    """What a worker can really run: its node groups (free-capacity histograms with topology
    labels) and, when it runs Kueue, its ClusterQueues and LocalQueues. ``full`` replaces all
    that was known of the worker; otherwise it is a change: groups and queues listed are
    replaced (a group with no bins, a queue in ``queues_removed`` is gone), the rest kept."""

    cluster: str
    full: bool = False
    node_groups: list[NodeGroup] = field(default_factory=list)
    topology_levels: list[str] | None = None  # node label keys, widest first; None = unchanged
    queues: list[WorkerQueueFact] = field(default_factory=list)
    queues_removed: list[str] = field(default_factory=list)
    local_queues: dict[str, str] | None = None  # "namespace/name" -> ClusterQueue; None = unchanged


class RemoteCreated(Event, frozen=True, kw_only=True):
    job: JobRef
    cluster: str
    attempt: int


class RemoteAdmitted(Event, frozen=True, kw_only=True):
    job: JobRef
    cluster: str
    attempt: int


class RemoteRejected(Event, frozen=True, kw_only=True):
    job: JobRef
    cluster: str
    attempt: int
    reason: str = ""


class RemoteEvicted(Event, frozen=True, kw_only=True):
    job: JobRef
    cluster: str
    attempt: int
    reason: str = ""


class RemoteFinished(Event, frozen=True, kw_only=True):
    job: JobRef
    cluster: str
    attempt: int
    succeeded: bool = True
    reason: str = ""


class RemoteGone(Event, frozen=True, kw_only=True):
    """The actuator removed a remote copy (after Withdrawn/Evict/clean-up)."""

    job: JobRef
    cluster: str
    attempt: int


# ---- inputs: the sequencer itself -----------------------------------------------------------


class Tick(Event, frozen=True, kw_only=True):
    """Time passes. Timers fire when a Tick's sequencing time passes their deadline."""


class PluginRef(Struct, frozen=True, omit_defaults=True, gc=False):
    """Where a plugin a policy uses came from, so a replay elsewhere can tell whether it runs the
    same code: the distribution that provides it and that distribution's version (``kdispatch``
    and its own version for the built-in ones)."""

    name: str
    distribution: str
    version: str
    builtin: bool = False


class PolicyLoaded(Event, frozen=True, kw_only=True):
    """The leader's policy (profiles, priority classes, timeouts), recorded so replay is
    self-contained. Appended at start-up whenever it differs from the last one in the log.

    ``plugins``: every plugin the profiles use (the built-in default profile's too when the policy
    does not replace it), by name; ``None`` in logs written before it was recorded, which used
    only built-in plugins. The core ignores it: it is for replay to check its environment.
    """

    profiles: list[Profile]
    priority_classes: dict[str, int] = field(default_factory=dict)
    worker_lost_timeout_ms: int = 60_000
    claim_ttl_ms: int = 120_000
    requeue_backoff_ms: int = 10_000
    plugins: list[PluginRef] | None = None


# ----------------------------------------------------------------------------------------------
# Tenancy: the queue configuration, in Kueue's vocabulary (docs/tenancy.md)
# ----------------------------------------------------------------------------------------------

ReclaimPolicy = Literal["Never", "LowerPriority", "Any"]
WithinQueuePolicy = Literal["Never", "LowerPriority", "LowerOrNewerEqualPriority"]
BorrowPolicy = Literal["Never", "LowerPriority"]
QueueingStrategy = Literal["BestEffortFIFO", "StrictFIFO"]
StopPolicy = Literal["None", "Hold", "HoldAndDrain"]


class ResourceQuota(Struct, frozen=True, omit_defaults=True, gc=False):
    """One resource of one flavor: Kueue's ``resources[]`` entry, in the event's integer units.
    Fleet-wide: the team's quota summed over every worker cluster."""

    name: str
    nominal: int
    borrowing_limit: int | None = None  # None: may borrow all the cohort lends
    lending_limit: int | None = None  # None: all of its unused nominal quota may be lent


class FlavorQuotas(Struct, frozen=True, omit_defaults=True, gc=False):
    name: str  # a ResourceFlavor
    resources: list[ResourceQuota] = field(default_factory=list)


class ResourceGroup(Struct, frozen=True, omit_defaults=True, gc=False):
    covered_resources: list[str]
    flavors: list[FlavorQuotas] = field(default_factory=list)  # in the order they are tried


class QueuePreemption(Struct, frozen=True, omit_defaults=True, gc=False):
    reclaim_within_cohort: ReclaimPolicy = "Never"
    within_cluster_queue: WithinQueuePolicy = "Never"
    borrow_within_cohort: BorrowPolicy = "Never"
    borrow_max_priority_threshold: int | None = None


class LabelRequirement(Struct, frozen=True, omit_defaults=True, gc=False):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = field(default_factory=list)


class LabelSelector(Struct, frozen=True, omit_defaults=True, gc=False):
    """Kubernetes' LabelSelector; ``{}`` matches everything."""

    match_labels: dict[str, str] = field(default_factory=dict)
    match_expressions: list[LabelRequirement] = field(default_factory=list)


class ClusterQueueSpec(Struct, frozen=True, omit_defaults=True, gc=False):
    name: str
    cohort: str | None = None
    # Kueue's nil selector matches no namespace; ``LabelSelector()`` matches all.
    namespace_selector: LabelSelector | None = None
    resource_groups: list[ResourceGroup] = field(default_factory=list)
    weight_milli: int = 1000  # spec.fairSharing.weight in thousandths (integers keep the order exact)
    preemption: QueuePreemption = field(default_factory=QueuePreemption)
    queueing_strategy: QueueingStrategy = "BestEffortFIFO"
    stop_policy: StopPolicy = "None"
    # Beyond Kueue: the WorkloadPriorityClasses its namespaces may use; None = any.
    allowed_priority_classes: list[str] | None = None


class CohortSpec(Struct, frozen=True, omit_defaults=True, gc=False):
    name: str
    parent: str | None = None
    weight_milli: int = 1000
    resource_groups: list[ResourceGroup] = field(default_factory=list)  # the cohort's own quota


class LocalQueueSpec(Struct, frozen=True, omit_defaults=True, gc=False):
    namespace: str
    name: str
    cluster_queue: str
    stop_policy: StopPolicy = "None"


class QueuesConfigured(Event, frozen=True, kw_only=True):
    """The whole queue configuration as of this point (ClusterQueue, Cohort, LocalQueue,
    WorkloadPriorityClass, ResourceFlavor and Namespace objects, validated). Appended whenever
    it changes, so replay never reads live config. A log without one has tenancy off: one
    unlimited queue, every job in it."""

    cluster_queues: list[ClusterQueueSpec] = field(default_factory=list)
    cohorts: list[CohortSpec] = field(default_factory=list)
    local_queues: list[LocalQueueSpec] = field(default_factory=list)
    priority_classes: dict[str, int] = field(default_factory=dict)  # WorkloadPriorityClass -> value
    flavors: list[str] = field(default_factory=list)  # ResourceFlavor names
    namespaces: dict[str, dict[str, str]] = field(default_factory=dict)  # namespace -> labels
    source: str = ""  # where it came from: a file path, or "manager" for the watched objects


class Rejected(Event, frozen=True, kw_only=True):
    """An inbox message that could not be decoded; moved aside with the reason."""

    inbox_seq: int
    subject: str
    reason: str
    raw: str = ""  # the first bytes, for a person to look at


# ---- decisions (written only by the leader) --------------------------------------------------

RequeueReason = Literal[
    "WorkerLost",
    "AdmissionTimeout",
    "Preempted",
    "Evicted",
    "Rejected",
    "Suspended",
    "SpecChanged",
    "ClusterRemoved",
]


class Nominated(Event, frozen=True, kw_only=True):
    """Create copies on these clusters (round ``round`` of ``attempt``)."""

    job: JobRef
    clusters: list[str]
    attempt: int
    round: int = 0
    deadline_ms: int | None = None  # the round times out at this sequencing time
    # Tenancy: resource -> ResourceFlavor the job's quota is charged to (empty without tenancy).
    flavors: dict[str, str] = field(default_factory=dict)


class Placed(Event, frozen=True, kw_only=True):
    job: JobRef
    cluster: str
    attempt: int


class Withdrawn(Event, frozen=True, kw_only=True):
    """Remove the copy of ``attempt`` from ``cluster``."""

    job: JobRef
    cluster: str
    attempt: int
    reason: str = ""


class Unschedulable(Event, frozen=True, kw_only=True):
    job: JobRef
    reasons: dict[str, int] = field(default_factory=dict)  # reason -> number of clusters
    message: str = ""


class Requeued(Event, frozen=True, kw_only=True):
    job: JobRef
    reason: RequeueReason
    cluster: str | None = None
    not_before_ms: int | None = None  # back-off: not dispatched before this time
    message: str = ""


class ClusterLost(Event, frozen=True, kw_only=True):
    cluster: str
    last_seen_ms: int = 0


class ClusterRecovered(Event, frozen=True, kw_only=True):
    cluster: str


class PreemptionClaimed(Event, frozen=True, kw_only=True):
    preemptor: JobRef
    cluster: str
    victims: list[JobRef]
    expires_ms: int
    claim: Resources = field(default_factory=dict)


class Evict(Event, frozen=True, kw_only=True):
    job: JobRef
    cluster: str
    attempt: int
    preemptor: JobRef | None = None
    reason: str = "Preempted"


class ClaimExpired(Event, frozen=True, kw_only=True):
    preemptor: JobRef
    cluster: str


class Finished(Event, frozen=True, kw_only=True):
    """The job is done (succeeded or failed) on ``cluster``; its capacity is released."""

    job: JobRef
    cluster: str
    attempt: int
    succeeded: bool = True


class CleanUp(Event, frozen=True, kw_only=True):
    """Remote objects of a job that no live job wants (deleted, finished): remove them."""

    job: JobRef
    cluster: str
    attempt: int


InputEvent = (
    JobSubmitted
    | JobObserved
    | JobUpdated
    | JobDeleted
    | ClusterRegistered
    | ClusterUpdated
    | ClusterRemoved
    | ClusterHeartbeat
    | ClusterCapacityReported
    | RemoteCreated
    | RemoteAdmitted
    | RemoteRejected
    | RemoteEvicted
    | RemoteFinished
    | RemoteGone
    | Tick
    | PolicyLoaded
    | QueuesConfigured
    | Rejected
)

DecisionEvent = (
    Nominated
    | Placed
    | Withdrawn
    | Unschedulable
    | Requeued
    | ClusterLost
    | ClusterRecovered
    | PreemptionClaimed
    | Evict
    | ClaimExpired
    | Finished
    | CleanUp
)

AnyEvent = InputEvent | DecisionEvent

INPUT_TYPES: tuple[type[Event], ...] = InputEvent.__args__
DECISION_TYPES: tuple[type[Event], ...] = DecisionEvent.__args__
ALL_TYPES: tuple[type[Event], ...] = INPUT_TYPES + DECISION_TYPES


def is_decision(event: Event) -> bool:
    return isinstance(event, DECISION_TYPES)


# ----------------------------------------------------------------------------------------------
# The log entry: what the Log stream holds (one JetStream message each).
# ----------------------------------------------------------------------------------------------


class LogEntry(Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """One log record. The leader stamps every entry of one batch with the same ``at_ms``.

    ``seq`` is the log stream sequence (known before the append: the append is fenced on
    ``seq - 1``). Inputs record the ``inbox_seq`` they were copied from, which is how a
    restarted sequencer resumes. Decisions of one batch carry ``batch = (index, count)`` so a
    batch cut short by a crash can be recognised and completed by the next leader.
    """

    seq: int
    at_ms: int
    event: AnyEvent
    inbox_seq: int | None = None
    batch: tuple[int, int] | None = None
    leader: str = ""


__all__ = [name for name in dir() if not name.startswith("_") and name not in {"annotations", "msgspec"}]
