"""Per-job records: what the log says about a job and each of its remote copies."""

from __future__ import annotations

from collections.abc import Sequence

from msgspec import Struct, field

from eventlog.events import JobRef, Placement, PodSet, Resources
from reconciler.core import phases

# Records are plain data with no reference cycles (``gc=False``: the collector never scans
# them, which matters with a million of them); defaults are left out of snapshots.


class Copy(Struct, kw_only=True, gc=False):
    cluster: str
    attempt: int
    state: str = phases.COPY_NOMINATED
    counted: bool = False  # its demand is in the cluster's assumed usage


class Report(Struct, kw_only=True, gc=False):
    """A worker fact waiting for ``decide`` to act on it."""

    kind: str  # "finished" | "evicted" | "rejected" | "gone"
    cluster: str
    attempt: int
    succeeded: bool = True
    reason: str = ""


class Claim(Struct, kw_only=True):
    preemptor: str  # job key
    cluster: str
    victims: list[str]
    expires_ms: int
    priority: int
    claim: Resources = field(default_factory=dict)
    # The attempt of each victim when claimed: a victim requeued and placed again is a new run,
    # not this claim's business any more.
    victim_attempts: list[int] = field(default_factory=list)

    def wants(self, job: JobRecord) -> bool:
        """Whether this claim still counts on evicting ``job`` (that run, on that cluster)."""
        for key, attempt in zip(self.victims, self.victim_attempts, strict=False):
            if key == job.key:
                return attempt == job.attempt and job.cluster == self.cluster
        return False


class Charge(Struct, kw_only=True, gc=False):
    """The quota a job holds (tenancy): charged once from its nomination until it is released,
    kept on the record so the release is exactly what was charged."""

    cluster_queue: str
    amounts: list[tuple[str, str, int]] = field(default_factory=list)  # (flavor, resource, amount)

    @property
    def flavors(self) -> dict[str, str]:
        return {resource: flavor for flavor, resource, _ in self.amounts}


NO_PLACEMENT = Placement()


class JobRecord(Struct, kw_only=True, gc=False, omit_defaults=True):
    """What the log says about one job. The spec parts (``pod_sets`` to ``spec_key``,
    ``placement``) are shared with every job of the same spec (``reconciler.core.intern``):
    replace them, never edit them in place."""

    ref: JobRef
    # Defaults only for snapshots, which keep each spec once (``reconciler.core.snapshot``).
    pod_sets: list[PodSet] = field(default_factory=list)
    demand: Resources = field(default_factory=dict)
    spec_key: bytes = b""  # placement, pod sets, namespace and queue: jobs with equal keys get equal verdicts
    event_priority: int = 0
    priority_class: str | None = None
    priority: int = 0
    placement: Placement = NO_PLACEMENT  # frozen: one shared default
    submitted_seq: int = 0
    submitted_at_ms: int | None = None  # sequencing time of the submission (wait-time metrics)
    phase: str = phases.QUEUED
    suspended: bool = False
    attempt: int = 1
    round: int = 0
    # Tuples, replaced rather than edited, like ``copies``: a list each, empty for most records,
    # was two more objects per job for the garbage collector to walk.
    nominated: tuple[str, ...] = ()  # open nominations of this round
    tried: tuple[str, ...] = ()  # clusters of earlier rounds of this attempt
    deadline_ms: int | None = None
    winner: str | None = None  # first cluster to admit (or create, BestEffort) this attempt
    cluster: str | None = None  # placed here
    placed_at_ms: int | None = None
    evictions: int = 0
    requeues: int = 0
    not_before_ms: int | None = None
    last_reason: str = ""
    unschedulable: dict[str, int] | None = None  # last reported summary (not re-emitted if equal)
    # Tuples, replaced rather than edited: almost every record has none, and an empty tuple,
    # unlike an empty list, is one shared object.
    copies: tuple[Copy, ...] = ()
    reports: tuple[Report, ...] = ()
    spec_changed: bool = False
    evicting_for: str | None = None  # preemptor key while an Evict is outstanding
    succeeded: bool | None = None
    runtime_ms: int | None = None
    # Tenancy: the LocalQueue named on the job and the ClusterQueue the webhook resolved (None in
    # logs without tenancy), and the quota the job holds while nominated or placed.
    queue: str | None = None
    cluster_queue: str | None = None
    charge: Charge | None = None
    # ``ref.key``, made once: every index of the state (jobs, waiting, pending, ...) holds this
    # one string instead of its own copy. Derived; an older snapshot without it gets it here.
    key: str = ""

    def __post_init__(self) -> None:
        if not self.key:
            self.key = self.ref.key

    def copy(self, cluster: str, attempt: int) -> Copy | None:
        return find_copy(self.copies, cluster, attempt)


def find_copy(copies: Sequence[Copy], cluster: str, attempt: int) -> Copy | None:
    for c in copies:
        if c.cluster == cluster and c.attempt == attempt:
            return c
    return None


def gang_demand(pod_sets: list[PodSet]) -> Resources:
    total: Resources = {}
    for ps in pod_sets:
        for name, amount in ps.requests.items():
            total[name] = total.get(name, 0) + amount * ps.count
    return {k: total[k] for k in sorted(total) if total[k] > 0}
