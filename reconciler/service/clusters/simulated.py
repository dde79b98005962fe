"""A simulated worker cluster in real time: the pure ``SimWorker`` driven by the wall clock.

Used by ``kdispatch demo``/``serve`` for clusters configured as ``simulated:`` and by the
end-to-end benchmark. Requests go straight into the model (a request while the cluster is silent
raises ``Unreachable``, like a network partition); ``run`` sleeps until the model's next event
or the next heartbeat check, whichever is first, then reports what happened (heartbeats through
``HeartbeatGate``: on change, else once per keepalive period). A model with nodes also reports
``ClusterCapacityReported``: its whole node picture first, then the groups that changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Callable

import msgspec

from eventlog.events import ClusterCapacityReported, ClusterHeartbeat, InputEvent, JobRef
from reconciler.edge.logging import get_logger
from reconciler.service.clusters.base import CopyRef, RemoteSpec, Reporter, Unreachable, remote_fact_id
from reconciler.service.clusters.heartbeats import HeartbeatGate
from reconciler.simworker import SimWorker

log = get_logger("reconciler.clusters.sim")


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


class SimCluster:
    def __init__(
        self,
        model: SimWorker,
        *,
        heartbeat_interval_s: float = 5.0,
        heartbeat_keepalive_s: float | None = None,
        clock: Callable[[], int] = wall_ms,
    ) -> None:
        self.model = model
        self.name = model.name
        self.heartbeat_interval_ms = int(heartbeat_interval_s * 1000)
        keepalive = None if heartbeat_keepalive_s is None else int(heartbeat_keepalive_s * 1000)
        self.heartbeats = HeartbeatGate(self.name, interval_ms=self.heartbeat_interval_ms, keepalive_ms=keepalive)
        self.clock = clock
        self._wake = asyncio.Event()
        self.reported = 0

    # -- requests (the actuator) --------------------------------------------------------------

    async def create(self, spec: RemoteSpec) -> None:
        now = self.clock()
        ok = self.model.create(spec.job, spec.attempt, spec.pod_sets, spec.priority, spec.runtime_ms, now)
        self._after_request(ok, "create", spec.job)

    async def delete(self, job: JobRef, attempt: int) -> None:
        self._after_request(self.model.delete(job.uid, attempt, self.clock()), "delete", job)

    async def evict(self, job: JobRef, attempt: int, *, reason: str) -> None:
        self._after_request(self.model.evict(job.uid, attempt, self.clock(), reason=reason), "evict", job)

    async def copies(self) -> list[CopyRef]:
        now = self.clock()
        if self.model.is_silent(now):
            raise Unreachable(f"simulated cluster {self.name} is silent")
        return [
            CopyRef(
                job_uid=c.job.uid,
                attempt=c.attempt,
                namespace=c.job.namespace,
                name=c.job.name,
                age_ms=now - c.created_ms,
            )
            for c in self.model.copies()
        ]

    def _after_request(self, ok: bool, verb: str, job: JobRef) -> None:
        if not ok:
            raise Unreachable(f"simulated cluster {self.name} is silent ({verb} {job.key})")
        self._wake.set()

    # -- fault injection (demo, tests) --------------------------------------------------------

    def silence(self, seconds: float | None) -> None:
        """Go silent for ``seconds`` (None: until ``recover``)."""
        now = self.clock()
        self.model.silence(None if seconds is None else now + int(seconds * 1000), now_ms=now)
        self._wake.set()

    def recover(self) -> None:
        self.model.recover()
        self._wake.set()

    # -- observation ----------------------------------------------------------------------------

    async def run(self, reporter: Reporter, stop: asyncio.Event) -> None:
        next_heartbeat = self.clock()
        bound = log.bind(cluster=self.name)
        while not stop.is_set():
            self._wake.clear()  # before advancing: a request arriving meanwhile wakes us again
            now = self.clock()
            facts = self.model.advance(now)
            if facts:
                await self._report(reporter, facts)
            if now >= next_heartbeat:
                hb = self.model.heartbeat(now)
                # Observed even while silent: whatever the cluster says when it returns is news.
                msg_id = self.heartbeats.observe(hb, now)
                if msg_id is not None and hb.reachable:  # a silent cluster's heartbeats stop arriving
                    await reporter.report(hb, msg_id=msg_id)
                next_heartbeat = self.heartbeats.next_check_ms(now)
            due = self.model.next_event_ms()
            wake_at = next_heartbeat if due is None else min(due, next_heartbeat)
            delay = max(wake_at - self.clock(), 0) / 1000
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(_first(self._wake, stop), delay)
        bound.debug("sim_cluster_stopped")

    def _fact_id(self, fact: InputEvent) -> str:
        if isinstance(fact, ClusterCapacityReported):
            # A retry of one report is recorded once; the next report differs in time or content.
            digest = hashlib.sha256(msgspec.json.encode(fact)).hexdigest()[:16]
            return f"cap/{self.name}/{self.clock()}/{digest}"
        return remote_fact_id(fact)

    async def _report(self, reporter: Reporter, facts: list[InputEvent]) -> None:
        # One burst, in order, acks collected together (an inbox that cannot: one by one,
        # pipelined by gathering).
        report_many = getattr(reporter, "report_many", None)
        if report_many is not None:
            await report_many([(f, self._fact_id(f)) for f in facts])
        else:
            await asyncio.gather(*(reporter.report(f, msg_id=self._fact_id(f)) for f in facts))
        self.reported += len(facts)

    def heartbeat(self) -> ClusterHeartbeat:
        return self.model.heartbeat(self.clock())


async def _first(*events: asyncio.Event) -> None:
    """Wait until any of ``events`` is set."""
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
