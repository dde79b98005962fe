"""One shared copy of what many jobs have in common.

A million pending jobs come from a few thousand specs: the same placement, pod sets, namespace
and queue. Each ``JobSubmitted`` decoded from the log brings its own copy of all of them, and
the record used to keep that copy (with its own demand dict and ``spec_key`` bytes). Here equal
values map to one canonical object that every record points to.

Interning changes which object a record holds, never its value, so it cannot change a decision;
the table is a pure cache of the state (not in snapshots: ``load_state`` interns as it loads).
Values are keyed by their msgpack encoding in insertion order, so a canonical object is equal to
the one it replaces down to the order of its dicts' keys. What no record uses any more is dropped
once the table has doubled (``_Table.purge``). Canonical objects are shared, so they are never
mutated in place: the fold replaces a record's pod sets or reasons, it does not edit them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, NamedTuple, TypeVar

import msgspec

from eventlog.events import JobRef, Placement, PodSet, Resources
from reconciler.core.jobs import JobRecord, gang_demand

T = TypeVar("T")

_exact = msgspec.msgpack.Encoder()  # insertion order: equal bytes, equal down to dict order

FIRST_PURGE = 4096


def spec_key(ref: JobRef, placement: Placement, pod_sets: Sequence[PodSet], queue: str | None) -> bytes:
    """Jobs with equal keys get equal verdicts from every filter: the pod sets (shape and node
    constraints) and the LocalQueue they land in on a worker count, not only the sums. Also the
    key of the spec in the intern table, so equal keys are equal specs down to dict order."""
    return _exact.encode((placement, list(pod_sets), ref.namespace, queue))


class Spec(NamedTuple):
    """What a record keeps of its submission's spec, shared by every job with the same one."""

    placement: Placement
    pod_sets: list[PodSet]
    demand: Resources
    spec_key: bytes


class _Table(Generic[T]):
    """key -> canonical value. ``purge`` drops the entries whose ``witness`` (the part of the
    value records point to) has no more references than a fresh ``probe`` entry of the same
    shape that nothing else uses. Reference counts decide only what stays cached, never a value."""

    def __init__(
        self,
        witness: Callable[[T], object],
        probe: Callable[[], tuple[Hashable, T]],
        grew: Callable[[], None],
    ) -> None:
        self.entries: dict[Hashable, T] = {}
        self._grew = grew
        self._witness = witness
        self._probe = probe

    def get(self, key: Hashable, make: Callable[[], T]) -> T:
        value = self.entries.get(key)
        if value is None:
            value = self.entries[key] = make()
            self._grew()
        return value

    def purge(self) -> None:
        key, value = self._probe()
        self.entries[key] = value
        probe = id(self._witness(value))
        del key, value  # from here on, only the table refers to the probe, as to an unused entry
        counts = [(k, v, sys.getrefcount(self._witness(v))) for k, v in self.entries.items()]
        unused = next(n for _, v, n in counts if id(self._witness(v)) == probe)
        self.entries = {k: v for k, v, n in counts if n > unused and id(self._witness(v)) != probe}

    def __len__(self) -> int:
        return len(self.entries)


def _itself(value: T) -> T:
    return value


def _fresh(tag: str) -> str:
    """A new string object no key can equal (built, so that no code object holds it)."""
    return "\0".join(("", "intern-probe", tag))


def _probe_spec() -> tuple[Hashable, Spec]:
    key = _fresh("spec").encode()
    return key, Spec(placement=Placement(), pod_sets=[], demand={}, spec_key=key)


class Interner:
    """``enabled=False`` keeps every object as it came (bench/memory.py's baseline)."""

    def __init__(self, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self._specs: _Table[Spec] = _Table(lambda s: s.spec_key, _probe_spec, self._added)
        self._placements: _Table[Placement] = _Table(
            _itself, lambda: (_fresh("placement"), Placement()), self._added
        )
        self._pod_sets: _Table[tuple[list[PodSet], Resources]] = _Table(
            lambda p: p[0], lambda: (_fresh("pods"), ([], {})), self._added
        )
        self._reasons: _Table[dict[str, int]] = _Table(_itself, lambda: (_fresh("reasons"), {}), self._added)
        self._strings: _Table[str] = _Table(_itself, lambda: (s := _fresh("string"), s), self._added)
        self._numbers: _Table[int] = _Table(
            _itself, lambda: (n := 10**30 + len(_fresh("number")), n), self._added
        )
        self._tables = (
            self._specs,
            self._placements,
            self._pod_sets,
            self._reasons,
            self._strings,
            self._numbers,
        )
        self._new = 0  # entries made since the last purge
        self._purge_after = FIRST_PURGE

    def __len__(self) -> int:
        return sum(len(table) for table in self._tables)

    def purge(self) -> None:
        """Drop what no record uses (specs first: they hold placements and pod sets)."""
        for table in self._tables:
            table.purge()
        self._new = 0
        self._purge_after = max(FIRST_PURGE, len(self))  # again once the tables have doubled

    def _added(self) -> None:
        self._new += 1
        if self._new >= self._purge_after:
            self.purge()

    def string(self, s: str) -> str:
        if not self.enabled:
            return s
        shared = self._strings.entries.get(s)  # (the fold's hot path: no closure when known)
        return shared if shared is not None else self._strings.get(s, lambda: s)

    def optional(self, s: str | None) -> str | None:
        return None if s is None else self.string(s)

    def ref(self, ref: JobRef) -> JobRef:
        """The same reference with its namespace shared (name and uid are the job's own)."""
        namespace = self.string(ref.namespace) if self.enabled else ref.namespace
        if namespace is ref.namespace:
            return ref
        return JobRef(
            namespace=namespace, name=ref.name, uid=ref.uid, api_version=ref.api_version, kind=ref.kind
        )

    def spec(self, ref: JobRef, placement: Placement, pod_sets: Sequence[PodSet], queue: str | None) -> Spec:
        pods = pod_sets if type(pod_sets) is list else list(pod_sets)
        key = _exact.encode((placement, pods, ref.namespace, queue))  # = spec_key(...)
        if not self.enabled:
            return Spec(placement=placement, pod_sets=list(pods), demand=gang_demand(pods), spec_key=key)
        spec = self._specs.entries.get(key)  # (a known spec, the usual case: no closure)
        if spec is None:
            pods = list(pods)  # the record's own list, not the event's
            spec = self._specs.get(key, lambda: self._new_spec(key, placement, pods))
        return spec

    def _new_spec(self, key: bytes, placement: Placement, pods: list[PodSet]) -> Spec:
        shared = self._placements.get(_exact.encode(placement), lambda: placement)
        pod_sets, demand = self._pod_sets.get(_exact.encode(pods), lambda: (pods, gang_demand(pods)))
        return Spec(placement=shared, pod_sets=pod_sets, demand=demand, spec_key=key)

    def reasons(self, reasons: dict[str, int]) -> dict[str, int]:
        """An ``Unschedulable`` summary, shared."""
        if not self.enabled:
            return dict(reasons)
        key = tuple(reasons.items())
        shared = self._reasons.entries.get(key)
        if shared is None:
            shared = self._reasons.get(key, lambda: {self.string(k): n for k, n in reasons.items()})
        return shared

    def record(self, job: JobRecord) -> JobRecord:
        """Point a record (fresh from a snapshot) at the shared copies of what it holds."""
        job.ref = self.ref(job.ref)
        job.placement, job.pod_sets, job.demand, job.spec_key = self.spec(
            job.ref, job.placement, job.pod_sets, job.queue
        )
        job.queue = self.optional(job.queue)
        job.cluster_queue = self.optional(job.cluster_queue)
        job.priority_class = self.optional(job.priority_class)
        if job.unschedulable is not None:
            job.unschedulable = self.reasons(job.unschedulable)
        job.last_reason = self.string(job.last_reason)
        job.phase = self.string(job.phase)
        at_ms = job.submitted_at_ms
        if at_ms is not None:  # jobs submitted in one batch: one time, one int
            job.submitted_at_ms = self._numbers.get(at_ms, lambda: at_ms)
        return job
