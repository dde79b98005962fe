"""The status of each ``WorkerCluster``, written by the leader from its folded state.

``kubectl get workerclusters`` shows, per object: ``phase`` (Pending: not in the log yet; Ready;
Lost: no heartbeat within its worker-lost timeout; Draining: deleted, waiting for what runs there;
Error: kdispatch cannot use it, ``message`` says why), ``lastHeartbeatTime`` (the last heartbeat
the log has), and ``jobs`` (jobs with a copy there). Only the replica that leads writes (its state
is the log's; a standby's is not followed), and only what changed, at most every ``interval_s``.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable
from typing import Any

from reconciler.core.clusters import LOST, REMOVED
from reconciler.core.state import State
from reconciler.edge.logging import get_logger
from reconciler.service.clusters.api import ApiError, KubeApi
from reconciler.service.clusters.base import Unreachable
from reconciler.service.clusters.declared import DeclaredClusters
from reconciler.service.clusters.objects import GROUP, PLURAL, VERSION, is_draining
from reconciler.service.clusters.watch import sleep_or_stop

log = get_logger("reconciler.clusters.declaredstatus")

_FIELDS = ("phase", "message", "jobs", "lastHeartbeatTime", "observedGeneration")


def _time(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_of(name: str, obj: dict[str, Any], state: State, *, error: str = "") -> dict[str, Any]:
    """The status subresource of one WorkerCluster, as the log (``state``) has its cluster."""
    meta = obj.get("metadata") or {}
    out: dict[str, Any] = {"observedGeneration": int(meta.get("generation") or 0)}
    slot = state.clusters.index.get(name)
    record = state.clusters.records[slot] if slot is not None else None
    jobs = len(state.by_cluster.get(name, {}))
    if record is not None and record.health != REMOVED:
        out["jobs"] = jobs
        if record.last_seen_ms:
            out["lastHeartbeatTime"] = _time(record.last_seen_ms)
    if error:
        out.update(phase="Error", message=error)
    elif record is None or record.health == REMOVED:
        out.update(phase="Pending", message="not registered yet")
    elif is_draining(record.taints) or meta.get("deletionTimestamp"):
        lost = " (lost: waiting for it to answer)" if record.health == LOST else ""
        out.update(phase="Draining", message=f"{jobs} job(s) still there{lost}")
    elif record.health == LOST:
        out.update(phase="Lost", message="no heartbeat within the worker-lost timeout")
    else:
        out.update(phase="Ready", message="")
    return out


class DeclaredStatus:
    def __init__(
        self,
        api: KubeApi,
        declared: DeclaredClusters,
        state: Callable[[], State | None],
        *,
        interval_s: float = 2.0,
    ) -> None:
        self.api = api
        self.declared = declared
        self.state = state  # the leader's folded state; None when this replica does not lead
        self.interval_s = interval_s
        self._written: dict[str, dict[str, Any]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await sleep_or_stop(stop, self.interval_s)
            try:
                await self.write_all()
            except Exception as err:  # a status write must never take the clusters side down
                log.error("worker_cluster_status_failed", error=str(err))

    async def write_all(self) -> int:
        """Write every status that changed; how many were written."""
        state = self.state()
        if state is None:
            self._written.clear()  # not leading: what another leader wrote meanwhile is unknown
            return 0
        written = 0
        for name, obj in sorted(self.declared.objects.items()):
            status = status_of(name, obj, state, error=self.declared.errors.get(name, ""))
            if self._written.get(name) == status:
                continue
            body = {**dict.fromkeys(_FIELDS), **status}  # a merge patch: clear what is not said now
            try:
                await self.api.patch_status(GROUP, VERSION, PLURAL, "", name, {"status": body})
            except ApiError as err:
                if err.status != 404:
                    log.warning("worker_cluster_status_failed", cluster=name, error=str(err))
                continue
            except Unreachable as err:
                log.info("worker_cluster_status_failed", cluster=name, error=str(err))
                return written
            self._written[name] = status
            written += 1
        for name in [n for n in self._written if n not in self.declared.objects]:
            del self._written[name]
        return written
