"""The list + watch loop both Kubernetes adapters use, against an emulated API server over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import structlog

from eventlog.kube.kinds import KindInfo
from reconciler.service.clusters.api import KubeApi
from reconciler.service.clusters.watch import ListWatch, ref_tombstone
from tests.reconciler.clusters.conftest import ApiServer, batch_job
from tests.waiting import eventually

JOBS = KindInfo(group="batch", version="v1", kind="Job", plural="jobs", family="batch")
GROUP = ("batch", "v1", "jobs")


class Seen:
    """A handler that keeps (event type, name) in the order it was called."""

    def __init__(self, *, fail_first: int = 0) -> None:
        self.events: list[tuple[str, str]] = []
        self.fail_first = fail_first

    async def __call__(self, kind: KindInfo, type_: str, obj: dict[str, Any]) -> None:
        if self.fail_first:
            self.fail_first -= 1
            raise ValueError("a malformed object")
        self.events.append((type_, obj["metadata"]["name"]))


@asynccontextmanager
async def running(loop: ListWatch) -> AsyncIterator[None]:
    stop = asyncio.Event()
    task = asyncio.create_task(loop.run(stop))
    try:
        yield
        assert not task.done(), "the loop ended by itself"
    finally:
        stop.set()  # ends the loop between watches; an open watch ends by cancellation, as in the adapters
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


class CompactAfterFirstList:
    """The API, except that right after the first list the job ``a`` is deleted, ``b`` created and
    the history compacted: the watch from that list's version is answered 410 Gone."""

    def __init__(self, server: ApiServer, api: KubeApi) -> None:
        self.server, self.api, self.lists = server, api, 0

    async def list_objects(self, *args: Any, **kw: Any) -> dict[str, Any]:
        listing = await self.api.list_objects(*args, **kw)
        self.lists += 1
        if self.lists == 1:
            await self.api.delete(*GROUP, "team-a", "a")
            self.server.emulator.put(*GROUP, batch_job("b", uid="uid-b"))
            self.server.emulator.compact()
        return listing

    def watch(self, *args: Any, **kw: Any) -> Any:
        return self.api.watch(*args, **kw)


async def test_410_gone_lists_again_and_hands_over_what_was_missed(api_servers: Callable[..., Any]) -> None:
    server: ApiServer = await api_servers("c1")
    server.emulator.put(*GROUP, batch_job("a", uid="uid-a"))
    api = CompactAfterFirstList(server, server.api(role="worker", cluster="c1"))
    seen = Seen()
    with structlog.testing.capture_logs() as logs:
        async with running(ListWatch(api, (JOBS,), handle=seen, resync_s=60)):  # type: ignore[arg-type]
            await eventually(lambda: ("LISTED", "b") in seen.events, what="the re-list after 410")
            # Watching again, from the new list's version.
            server.emulator.patch_status(*GROUP, "team-a", "b", {"active": 1})
            await eventually(lambda: ("MODIFIED", "b") in seen.events, what="a change after the re-list")
    # ``a`` was deleted while no watch was open: the re-list tells, as DELETED.
    assert seen.events == [("LISTED", "a"), ("DELETED", "a"), ("LISTED", "b"), ("MODIFIED", "b")]
    assert api.lists == 2
    # At once, as an expired version, not after a back-off as a failure.
    assert [e["event"] for e in logs] == ["watch_expired_relisting"]


async def test_a_ref_tombstone_remembers_which_object_went_and_nothing_else(
    api_servers: Callable[..., Any],
) -> None:
    """The manager watcher's: for every job on the manager only its ref is kept between lists,
    and a job deleted while no watch was open is still handed over with that ref."""
    server: ApiServer = await api_servers("c1")
    server.emulator.put(*GROUP, batch_job("a", uid="uid-a"))
    api = CompactAfterFirstList(server, server.api(role="worker", cluster="c1"))
    gone: list[dict[str, Any]] = []

    async def handle(kind: KindInfo, type_: str, obj: dict[str, Any]) -> None:
        if type_ == "DELETED":
            gone.append(obj)

    loop = ListWatch(api, (JOBS,), handle=handle, resync_s=60, tombstone=ref_tombstone)  # type: ignore[arg-type]
    async with running(loop):
        await eventually(lambda: gone, what="the deletion noticed by the re-list")
    assert gone == [
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "a", "uid": "uid-a", "namespace": "team-a"}}
    ]


async def test_the_first_served_version_is_followed(api_servers: Callable[..., Any]) -> None:
    server: ApiServer = await api_servers("c1")
    server.emulator.put(*GROUP, batch_job("a", uid="uid-a"))
    served: list[tuple[str, bool]] = []
    seen = Seen()
    versions = (KindInfo(group="batch", version="v2alpha1", kind="Job", plural="jobs", family="batch"), JOBS)
    loop = ListWatch(
        server.api(role="worker", cluster="c1"),
        versions,
        handle=seen,
        on_served=lambda kind, ok: served.append((kind.version, ok)),
    )
    async with running(loop):
        await eventually(lambda: seen.events, what="the list through batch/v1")
    assert served[:2] == [("v2alpha1", False), ("v1", True)]
    assert seen.events == [("LISTED", "a")]


async def test_a_handler_that_fails_is_retried_not_the_end(api_servers: Callable[..., Any]) -> None:
    server: ApiServer = await api_servers("c1")
    server.emulator.put(*GROUP, batch_job("a", uid="uid-a"))
    seen = Seen(fail_first=1)
    async with running(ListWatch(server.api(role="worker", cluster="c1"), (JOBS,), handle=seen)):
        await eventually(lambda: seen.events, what="the list after the failure")
        server.emulator.put(*GROUP, batch_job("b", uid="uid-b"))
        await eventually(lambda: ("ADDED", "b") in seen.events, what="the watch after the failure")
    assert seen.events == [("LISTED", "a"), ("ADDED", "b")]
