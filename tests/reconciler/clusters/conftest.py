"""Fixtures: kmock API servers (extended, see kubeapi.py) reached through kubernetes-asyncio."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import pytest
import structlog
from aiohttp.test_utils import RawTestServer
from kubernetes_asyncio import client

from eventlog import events as ev
from reconciler.service.clusters.api import KubeApi
from tests.reconciler.clusters.kubeapi import KubeApiEmulator


@dataclass
class ApiServer:
    """One emulated cluster: the emulator (state) and its HTTP server, which can be killed and
    brought back on the same port with the same objects."""

    emulator: KubeApiEmulator
    server: RawTestServer | None = None
    port: int = 0
    clients: list[client.ApiClient] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        # aiohttp's test server directly (what kmock.Server wraps): kmock.Server also patches
        # aiohttp's resolver per server, which breaks when servers stop out of order.
        self.server = RawTestServer(self.emulator, host="127.0.0.1", port=self.port or None)
        await self.server.start_server()
        assert self.server.port is not None
        self.port = self.server.port

    async def kill(self) -> None:
        if self.server is not None:
            server, self.server = self.server, None
            self.emulator.drop_watches()  # else the shutdown waits for the streams to time out
            await server.close()

    def api(self, *, role: Any, cluster: str, timeout_s: float = 2.0) -> KubeApi:
        api_client = client.ApiClient(client.Configuration(host=self.url))
        self.clients.append(api_client)
        return KubeApi(api_client, role=role, cluster=cluster, timeout_s=timeout_s)


def serve_jobs(emu: KubeApiEmulator, *, kueue: bool = False) -> None:
    emu.serve("batch", "v1", "jobs", kind="Job")
    emu.serve("", "v1", "nodes", kind="Node", namespaced=False)
    emu.serve("", "v1", "pods", kind="Pod")
    emu.serve_events()
    if kueue:
        emu.serve("kueue.x-k8s.io", "v1beta1", "workloads", kind="Workload")
        emu.serve("kueue.x-k8s.io", "v1beta1", "clusterqueues", kind="ClusterQueue", namespaced=False)
        emu.serve("kueue.x-k8s.io", "v1beta1", "localqueues", kind="LocalQueue")


@pytest.fixture
async def api_servers() -> AsyncIterator[Callable[..., Any]]:
    """``await make(name, kueue=False)`` -> a running ApiServer; all are stopped afterwards."""
    made: list[ApiServer] = []

    async def make(name: str, *, kueue: bool = False) -> ApiServer:
        emu = KubeApiEmulator(name=name)
        serve_jobs(emu, kueue=kueue)
        await emu.__aenter__()
        srv = ApiServer(emulator=emu)
        await srv.start()
        made.append(srv)
        return srv

    yield make
    for srv in made:
        for c in srv.clients:  # first: open watches would hold the server's shutdown
            await c.close()
        await srv.kill()
        await srv.emulator.__aexit__(None, None, None)


class Recorder:
    """A Reporter that keeps facts like the inbox does: the first of each message id. ``calls``
    has every report, duplicates too: a component that reports a fact twice under one id is
    hidden by the inbox but not by ``calls``."""

    def __init__(self) -> None:
        self.events: list[ev.InputEvent] = []
        self.ids: set[str] = set()
        self.calls: list[ev.InputEvent] = []

    async def report(self, event: ev.InputEvent, *, msg_id: str) -> None:
        self.calls.append(event)
        if msg_id not in self.ids:
            self.ids.add(msg_id)
            self.events.append(event)

    def of(self, kind: type[Any]) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    def reported(self, kind: type[Any], name: str) -> list[Any]:
        """Every report of ``kind`` about the job ``name``, duplicates included."""
        return [e for e in self.calls if isinstance(e, kind) and e.job.name == name]


@pytest.fixture
def logs() -> Iterator[list[MutableMapping[str, Any]]]:
    """The structlog entries logged during the test (``event`` is the entry's name): what a
    component logs when it handles something is an event a test can wait for."""
    with structlog.testing.capture_logs() as entries:
        yield entries


def logged(entries: list[MutableMapping[str, Any]], event: str) -> list[MutableMapping[str, Any]]:
    return [e for e in entries if e.get("event") == event]


def batch_job(
    name: str, *, uid: str = "", namespace: str = "team-a", gpus: int = 1, parallelism: int = 1
) -> dict[str, Any]:
    """A batch Job as the webhook leaves it on the manager: suspended, managedBy MultiKueue."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            **({"uid": uid} if uid else {}),
            "labels": {"kueue.x-k8s.io/queue-name": "user-queue"},
            "annotations": {
                "kdispatch.io/placement": '{"clusterSelector":{},"dispatchMode":"MustBeAdmitted"}',
                # what the webhook computed (webhook/stamps.py): the watcher reads it back
                "kdispatch.io/pod-sets": json.dumps(
                    [{"count": parallelism, "name": "main", "requests": {"cpu": 500, "nvidia.com/gpu": gpus}}]
                ),
                "kdispatch.io/priority": '{"value":0}',
            },
        },
        "spec": {
            "suspend": True,
            "managedBy": "kueue.x-k8s.io/multikueue",
            "parallelism": parallelism,
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "manager-uid"}},
            "template": {
                "metadata": {"labels": {"batch.kubernetes.io/controller-uid": "manager-uid", "app": "x"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {"requests": {"cpu": "500m", "nvidia.com/gpu": str(gpus)}},
                        }
                    ],
                },
            },
        },
    }
