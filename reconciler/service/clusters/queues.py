"""The queue configuration watched on the manager cluster: Kueue's own objects, as Kueue reads them.

When ``serve`` has no ``--queues`` (nor ``queues:`` in its config), the ClusterQueues,
LocalQueues, Cohorts, WorkloadPriorityClasses and ResourceFlavors applied to the manager cluster,
and its Namespaces' labels, are the queue configuration: a team that runs Kueue there already
``kubectl apply``s the same files. One list/watch per resource (``watch.ListWatch``, the first of
v1beta2/v1beta1 the cluster serves; none when Kueue's CRDs are not installed) keeps the whole set;
after each change (settled for ``settle_s``, so one ``kubectl apply -f dir/`` is one change) the set
is validated by ``eventlog.kube.kueue`` and, when it differs from the configuration in force in the
log, published to the inbox as ``QueuesConfigured``: the leader records it like any input.

A set that fails validation is not published: the configuration in force stays, and the error is
logged with the object and field at fault (``queues_invalid``) until the set is fixed. Nothing is
dropped either way: a queue that disappears keeps its jobs, waiting (the core's rule).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from typing import Any

from eventlog import events as ev
from eventlog.kube.kinds import KindInfo
from eventlog.kube.kueue import GROUP, KUEUE_KINDS, VERSIONS, QueueConfigError, decode_objects
from reconciler.edge.logging import get_logger
from reconciler.policy import same_queues
from reconciler.service.clusters.api import KubeApi
from reconciler.service.clusters.base import Reporter
from reconciler.service.clusters.watch import ListWatch, by_name, sleep_or_stop

log = get_logger("reconciler.clusters.queues")

SOURCE = "manager"


def _coordinates(group: str, version: str, kind: str, plural: str) -> KindInfo:
    # ListWatch reads only the API coordinates of a KindInfo; the job-specific fields are unused.
    return KindInfo(group=group, version=version, kind=kind, plural=plural, family="workload")


WATCHED: list[tuple[KindInfo, ...]] = [
    *(tuple(_coordinates(GROUP, v, kind, plural) for v in VERSIONS) for kind, plural in KUEUE_KINDS.items()),
    (_coordinates("", "v1", "Namespace", "namespaces"),),
]
"""One list/watch per resource, versions newest first."""


class QueuesWatcher:
    """Follows the manager's Kueue objects; publishes each valid change of the whole set.

    ``in_force``: the configuration the log holds now (the actuator's projection), read once
    ``ready`` is set (the log was read to its end): a restart publishes nothing new, and a
    replica whose view is behind publishes what another already did, which the inbox keeps once
    (the message id is the set's objects and their resourceVersions)."""

    def __init__(
        self,
        api: KubeApi,
        reporter: Reporter,
        *,
        in_force: Callable[[], ev.QueuesConfigured | None],
        ready: asyncio.Event,
        resync_s: int = 300,
        settle_s: float = 0.5,
    ) -> None:
        self.api = api
        self.reporter = reporter
        self.in_force = in_force
        self.ready = ready
        self.resync_s = resync_s
        self.settle_s = settle_s
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}  # (kind, namespace/name) -> object
        self.served: dict[str, bool] = {}  # plural -> does the manager serve it
        self.error: QueueConfigError | None = None  # the current set's problem, if it has one
        self.published: ev.QueuesConfigured | None = None
        self._changed = asyncio.Event()

    async def run(self, stop: asyncio.Event) -> None:
        watches = [
            ListWatch(
                self.api,
                versions,
                handle=self._on_event,
                resync_s=self.resync_s,
                key=by_name,
                on_served=self._on_served,
                log=log.bind(cluster="manager"),
            )
            for versions in WATCHED
        ]
        tasks = [asyncio.create_task(w.run(stop)) for w in watches]
        tasks.append(asyncio.create_task(self._publish_loop(stop)))
        try:
            await stop.wait()
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _on_served(self, kind: KindInfo, served: bool) -> None:
        if self.served.get(kind.plural) != served and kind.group == GROUP:
            if served:
                log.info("queues_watching", resource=kind.plural, version=kind.version)
            elif kind.version == VERSIONS[-1]:
                log.info("queues_not_served", resource=kind.plural, hint="Kueue's CRDs are not installed")
        self.served[kind.plural] = served

    async def _on_event(self, kind: KindInfo, type_: str, obj: dict[str, Any]) -> None:
        key = (kind.kind, by_name(obj))
        if type_ == "DELETED":
            if self.objects.pop(key, None) is None:
                return
        else:
            previous = self.objects.get(key)
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if previous is not None and (previous.get("metadata") or {}).get("resourceVersion") == rv:
                return  # a re-list of what we hold: nothing changed
            self.objects[key] = {**obj, "apiVersion": kind.api_version, "kind": kind.kind}
        self._changed.set()

    async def _publish_loop(self, stop: asyncio.Event) -> None:
        await self.ready.wait()
        while not stop.is_set():
            await self._changed.wait()
            await sleep_or_stop(stop, self.settle_s)  # let the rest of one `kubectl apply` arrive
            self._changed.clear()
            try:
                await self.publish_if_changed()
            except Exception as err:  # the inbox unreachable: the next change or resync retries
                log.warning("queues_publish_failed", error=str(err))
                self._changed.set()
                await sleep_or_stop(stop, 1.0)

    async def publish_if_changed(self) -> ev.QueuesConfigured | None:
        """Validate the set held now; publish it when it is valid and not already in force."""
        keys = sorted(self.objects)
        docs = [(f"manager {kind}/{name.lstrip('/')}", self.objects[(kind, name)]) for kind, name in keys]
        try:
            config = decode_objects(docs, source=SOURCE, allow_empty=True)
        except QueueConfigError as err:
            if self.error is None or str(err) != str(self.error):
                log.error(
                    "queues_invalid",
                    error=str(err),
                    object=err.obj,
                    field=err.path,
                    reason=err.message,
                    kept="the queue configuration in force (nothing changes until this is fixed)",
                )
            self.error = err
            return None
        if self.error is not None:
            log.info("queues_valid_again")
        self.error = None
        current = self.in_force()
        has_queues = bool(
            config.cluster_queues or config.local_queues or config.cohorts or config.priority_classes
        )
        if current is None and not has_queues:
            return None  # no Kueue objects and none ever recorded: tenancy stays off, the log as today
        if same_queues(config, current) or same_queues(config, self.published):
            return None
        versions = ",".join(
            f"{k}/{n}@{(self.objects[(k, n)].get('metadata') or {}).get('resourceVersion', '')}"
            for k, n in keys
        )
        msg_id = "manager/queues/" + hashlib.sha256(versions.encode()).hexdigest()[:32]
        await self.reporter.report(config, msg_id=msg_id)
        self.published = config
        log.info(
            "queues_published",
            cluster_queues=[q.name for q in config.cluster_queues],
            local_queues=len(config.local_queues),
            cohorts=[c.name for c in config.cohorts],
        )
        return config
