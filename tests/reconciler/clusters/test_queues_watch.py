"""The queue configuration watched on an emulated manager cluster: Kueue objects applied there
become QueuesConfigured in the log; a bad set is not published and the configuration in force stays."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import yaml

from eventlog import events as ev
from eventlog.jetstream import JetStreamLog
from eventlog.kube.kueue import KUEUE_KINDS
from reconciler.service.clusters.queues import QueuesWatcher
from reconciler.service.clusters.reporter import InboxReporter
from reconciler.service.loop import LeaderLoop, LoopSettings, wait_ready
from tests.paths import REPO
from tests.reconciler.clusters.conftest import ApiServer, Recorder
from tests.reconciler.shell.scenario import POLICY, read_all
from tests.waiting import eventually

EXAMPLE = REPO / "deploy" / "examples" / "three-teams.yaml"
V = "v1beta2"


def serve_kueue(server: ApiServer) -> None:
    for kind, plural in KUEUE_KINDS.items():
        server.emulator.serve("kueue.x-k8s.io", V, plural, kind=kind, namespaced=kind == "LocalQueue")
    server.emulator.serve("", "v1", "namespaces", kind="Namespace", namespaced=False)


def apply(server: ApiServer, obj: dict[str, Any]) -> None:
    """``kubectl apply`` of one object (create, or replace its spec and metadata)."""
    kind = obj["kind"]
    group, version, plural = (
        ("", "v1", "namespaces") if kind == "Namespace" else ("kueue.x-k8s.io", V, KUEUE_KINDS[kind])
    )
    meta = obj["metadata"]
    if server.emulator.get(group, version, plural, meta.get("namespace", ""), meta["name"]) is None:
        server.emulator.put(group, version, plural, obj)
    else:
        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
        server.emulator._patch(
            (group, version, plural), meta.get("namespace", ""), meta["name"], body, subresource=None
        )


def example_objects() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]


@pytest.fixture
async def manager(api_servers: Callable[..., Any]) -> ApiServer:
    server: ApiServer = await api_servers("manager")
    serve_kueue(server)
    return server


@pytest.fixture
async def watched(manager: ApiServer) -> AsyncIterator[tuple[ApiServer, Recorder, QueuesWatcher]]:
    recorder = Recorder()
    ready = asyncio.Event()
    ready.set()
    watcher = QueuesWatcher(
        manager.api(role="manager", cluster="manager"),
        recorder,
        in_force=lambda: next(iter(reversed(recorder.of(ev.QueuesConfigured))), None),
        ready=ready,
        resync_s=1,
        settle_s=0.05,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    yield manager, recorder, watcher
    stop.set()
    await asyncio.wait_for(task, 10)


async def test_applied_objects_are_published_whole_and_a_bad_change_is_not(
    watched: tuple[ApiServer, Recorder, QueuesWatcher],
) -> None:
    server, recorder, watcher = watched
    for obj in example_objects():
        apply(server, obj)
    published = await eventually(
        # The namespaces are watched apart from the queues: a set published before the last
        # namespace's labels arrived is a whole set too, just not the last one.
        lambda: [q for q in recorder.of(ev.QueuesConfigured) if len(q.local_queues) == 3 and "research" in q.namespaces],
        what="the whole set",
    )
    config = published[-1]
    assert config.source == "manager"
    assert [q.name for q in config.cluster_queues] == ["ci", "product", "research"]
    assert config.namespaces["research"]["team"] == "research"
    count = len(recorder.of(ev.QueuesConfigured))
    # A ClusterQueue with a negative quota: not published, the error names the object and field.
    bad = next(o for o in example_objects() if o["kind"] == "ClusterQueue" and o["metadata"]["name"] == "ci")
    bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "-4"
    apply(server, bad)
    error = await eventually(lambda: watcher.error, what="the bad set noticed")
    assert error.obj == "ClusterQueue/ci"
    assert error.path == "$.spec.resourceGroups[0].flavors[0].resources[0].nominalQuota"
    assert len(recorder.of(ev.QueuesConfigured)) == count
    # Fixed: published again, with the new quota.
    bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = "24"
    apply(server, bad)
    fixed = await eventually(
        lambda: [q for q in recorder.of(ev.QueuesConfigured)[count:]], what="the fixed set published"
    )
    ci = next(q for q in fixed[-1].cluster_queues if q.name == "ci")
    assert ci.resource_groups[0].flavors[0].resources[0].nominal == 24_000
    assert watcher.error is None


async def test_no_kueue_objects_publish_nothing(
    watched: tuple[ApiServer, Recorder, QueuesWatcher],
) -> None:
    """A manager with namespaces but no queues: tenancy stays off and the log as it always was."""
    server, recorder, watcher = watched
    apply(
        server,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a", "labels": {"a": "b"}}},
    )
    await eventually(lambda: watcher.objects, what="the namespace seen")
    assert await watcher.publish_if_changed() is None
    assert recorder.of(ev.QueuesConfigured) == []


async def test_a_clusterqueue_applied_on_the_manager_lands_in_the_log(
    manager: ApiServer, jslog: JetStreamLog
) -> None:
    loop = LeaderLoop(jslog, LoopSettings(leader_id="A", policy=POLICY, idle_wait_s=0.02))
    stop = asyncio.Event()
    term = asyncio.create_task(loop.run_term(stop=stop))
    await wait_ready(loop, timeout_s=20)
    in_force: list[ev.QueuesConfigured] = []
    ready = asyncio.Event()
    ready.set()
    watcher = QueuesWatcher(
        manager.api(role="manager", cluster="manager"),
        InboxReporter(jslog.inbox),
        in_force=lambda: in_force[-1] if in_force else None,
        ready=ready,
        resync_s=1,
        settle_s=0.05,
    )
    watching = asyncio.create_task(watcher.run(stop))

    async def recorded() -> list[ev.QueuesConfigured]:
        return [e.event for e in await read_all(jslog) if isinstance(e.event, ev.QueuesConfigured)]

    try:
        apply(
            manager,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "ResourceFlavor",
                "metadata": {"name": "default"},
            },
        )
        cq = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "team-a"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [{"name": "default", "resources": [{"name": "cpu", "nominalQuota": 8}]}],
                    }
                ],
            },
        }
        apply(manager, cq)
        deadline = asyncio.get_running_loop().time() + 20
        while not any(q.cluster_queues for q in await recorded()):
            assert asyncio.get_running_loop().time() < deadline, "QueuesConfigured never reached the log"
            await asyncio.sleep(0.05)
        [first] = [q for q in await recorded() if q.cluster_queues]
        in_force.append(first)
        assert first.cluster_queues[0].resource_groups[0].flavors[0].resources[0].nominal == 8_000
        # A bad ClusterQueue (its LocalQueue points nowhere): nothing new in the log.
        apply(
            manager,
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": "q", "namespace": "team-a"},
                "spec": {"clusterQueue": "team-b"},
            },
        )
        error = await eventually(lambda: watcher.error, what="the bad set noticed")
        assert "no ClusterQueue named 'team-b'" in str(error) and "did you mean 'team-a'" in str(error)
        assert len(await recorded()) == 1
    finally:
        stop.set()
        await asyncio.wait_for(watching, 10)
        assert await term == "stopped"
