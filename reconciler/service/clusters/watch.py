"""List, then watch: one resource of one cluster, followed for as long as the adapter runs.

The informer pattern both the manager watcher and every Kubernetes worker use (docs/clusters.md):
list, hand over every object, then watch from the list's resourceVersion. The watch ends after
``resync_s`` (the server's ``timeoutSeconds``), on 410 Gone (the version was compacted away) or
when the connection drops; each time the resource is listed again, and an object the new list
no longer has is handed over as deleted (its DELETED event was missed; from what the loop kept of
it, ``tombstone``: its metadata, not its spec or status; or less, ``ref_tombstone``). Every
failure is retried with back-off and jitter; a handler that raises (a malformed object) is retried the same way,
so nothing ends the loop but ``stop``.

A resource can have several versions (``KindInfo``s); the first one the cluster serves is followed.
When none is served (a CRD that is not installed), they are tried again after ``resync_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from eventlog.kube.kinds import KindInfo
from reconciler.edge.logging import get_logger
from reconciler.service.clusters.api import ApiError, Gone, KubeApi
from reconciler.service.clusters.backoff import Backoff
from reconciler.service.clusters.base import Unreachable

LISTED = "LISTED"
"""The event type of an object in a (re-)list; the watch's own are ADDED, MODIFIED and DELETED."""

Handler = Callable[[KindInfo, str, dict[str, Any]], Awaitable[None]]
"""Called with (the version followed, event type, object), one object at a time, in order."""


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def tombstone(obj: dict[str, Any]) -> dict[str, Any]:
    """What the loop remembers of a followed object until the next list: enough to hand it over
    as deleted (kind, name, uid, labels, owners), not its spec and status. Every object of the
    resource is remembered, so whole objects would cost the size of the cluster's jobs."""
    meta = obj.get("metadata") or {}
    kept = {k: v for k, v in meta.items() if k != "managedFields"}
    annotations = meta.get("annotations")
    if isinstance(annotations, dict) and LAST_APPLIED in annotations:  # kubectl's copy of the whole object
        kept["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
    return {**{k: obj[k] for k in ("apiVersion", "kind") if k in obj}, "metadata": kept}


def ref_tombstone(obj: dict[str, Any]) -> dict[str, Any]:
    """A smaller ``tombstone`` for a handler that needs only which object went (kind, namespace,
    name, uid): the manager watcher remembers every job on the manager, and the whole metadata
    (labels, the webhook's annotations, our status annotation) cost about a kilobyte each. The
    strings every object repeats are interned: one copy, not one per job."""
    meta = obj.get("metadata") or {}
    kept = {k: meta[k] for k in ("name", "uid") if k in meta}
    if "namespace" in meta:
        kept["namespace"] = _intern(meta["namespace"])
    return {**{k: _intern(obj[k]) for k in ("apiVersion", "kind") if k in obj}, "metadata": kept}


def _intern(value: Any) -> Any:
    return sys.intern(value) if type(value) is str else value


def by_uid(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))


def by_name(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


@dataclass
class ListWatch:
    api: KubeApi
    versions: tuple[KindInfo, ...]
    handle: Handler
    resync_s: int = 300
    label_selector: str = ""
    keep: Callable[[dict[str, Any]], bool] = lambda _obj: True
    """Objects this loop follows; the others are neither handed over nor remembered."""
    key: Callable[[dict[str, Any]], str] = by_uid
    """What identifies an object between two lists (to notice the ones deleted meanwhile)."""
    tombstone: Callable[[dict[str, Any]], dict[str, Any]] = tombstone
    """What is remembered of each object until the next list, handed over when it vanished."""
    on_served: Callable[[KindInfo, bool], None] | None = None
    """Told whether the cluster serves a version, as soon as a list says so."""
    on_listed: Callable[[], None] | None = None
    """Told each time a list has been handed over, every object of it."""
    log: Any = None

    async def run(self, stop: asyncio.Event) -> None:
        log = self.log if self.log is not None else get_logger("reconciler.clusters.watch")
        backoff = Backoff(base_s=0.2, cap_s=30.0)
        known: dict[str, dict[str, Any]] = {}
        index = 0  # the version followed: the first one the cluster serves
        while not stop.is_set():
            kind = self.versions[index]
            bound = log.bind(resource=kind.plural, version=kind.version)
            try:
                rv, known = await self._list(kind, known)
                backoff.reset()
                await self._watch(kind, rv, known)
            except Gone:
                bound.info("watch_expired_relisting")
            except ApiError as err:
                if err.status == 404:  # this version is not served: the next one, or later again
                    if self.on_served is not None:
                        self.on_served(kind, False)
                    index = (index + 1) % len(self.versions)
                    if index == 0:
                        await sleep_or_stop(stop, self.resync_s)
                    continue
                delay = backoff.next_delay()
                bound.warning("watch_failed", error=str(err), retry_in_s=round(delay, 2))
                await sleep_or_stop(stop, delay)
            except Unreachable as err:
                delay = backoff.next_delay()
                bound.info("watch_disconnected", error=str(err), retry_in_s=round(delay, 2))
                await sleep_or_stop(stop, delay)
            except Exception as err:  # a malformed object must not end the watch for good
                delay = backoff.next_delay()
                bound.exception("watch_loop_error", error=str(err), retry_in_s=round(delay, 2))
                await sleep_or_stop(stop, delay)

    async def _list(
        self, kind: KindInfo, known: dict[str, dict[str, Any]]
    ) -> tuple[str, dict[str, dict[str, Any]]]:
        """List, hand over what vanished since the last list, then every object listed."""
        listing = await self.api.list_objects(
            kind.group, kind.version, kind.plural, label_selector=self.label_selector
        )
        if self.on_served is not None:
            self.on_served(kind, True)
        rv = str((listing.get("metadata") or {}).get("resourceVersion") or "")
        current = {self.key(o): o for o in listing.get("items") or [] if self.keep(o)}
        for key, obj in known.items():
            if key not in current:
                await self.handle(kind, "DELETED", obj)
        remembered: dict[str, dict[str, Any]] = {}
        for key, obj in current.items():
            await self.handle(kind, LISTED, obj)
            remembered[key] = self.tombstone(obj)
        if self.on_listed is not None:
            self.on_listed()
        return rv, remembered

    async def _watch(self, kind: KindInfo, rv: str, known: dict[str, dict[str, Any]]) -> None:
        """Follow the changes after ``rv``, keeping ``known`` in step, until the watch ends."""
        async for event in self.api.watch(
            kind.group,
            kind.version,
            kind.plural,
            resource_version=rv,
            label_selector=self.label_selector,
            timeout_s=self.resync_s,
        ):
            obj, type_ = event["object"], event["type"]
            if not self.keep(obj):
                continue
            if type_ == "DELETED":
                known.pop(self.key(obj), None)
            elif type_ in ("ADDED", "MODIFIED"):
                known[self.key(obj)] = self.tombstone(obj)
            else:
                continue  # BOOKMARK: nothing changed
            await self.handle(kind, type_, obj)


async def sleep_or_stop(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
