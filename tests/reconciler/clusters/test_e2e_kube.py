"""End to end on emulated Kubernetes clusters: one manager, three Kueue workers, a real nats-server,
the real sequencer loop and core, wired as ``serve`` wires them from a config file with kubeconfigs.

A submitted Job goes: JobSubmitted (as the webhook records it) -> log -> Nominated -> a copy on the
chosen worker -> the test admits and finishes it the way Kueue would -> Placed, status synced back
onto the manager Job -> Finished -> the copy cleaned up. Then a worker dies: Lost after the
timeout, the job re-placed elsewhere; the worker comes back with its stale copy: withdrawn.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from eventlog import events as ev
from eventlog.embedded import free_port
from eventlog.jetstream import JetStreamLog
from reconciler.config import decode_config
from reconciler.demo.apiserver import ApiServer as AdmissionClient
from reconciler.policy import policy_event
from reconciler.service.child import Supervised
from reconciler.service.loop import LoopSettings, wait_ready
from reconciler.service.wiring import Settings, running
from tests.reconciler.clusters.conftest import ApiServer, batch_job
from tests.waiting import eventually

JOBS = ("batch", "v1", "jobs")
WL = ("kueue.x-k8s.io", "v1beta1", "workloads")
CQ = ("kueue.x-k8s.io", "v1beta1", "clusterqueues")
WORKERS = ("w1", "w2", "w3")


def kubeconfig(path: Path, server: ApiServer, name: str) -> str:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": name, "cluster": {"server": server.url}}],
                "users": [{"name": name, "user": {"token": f"secret-token-of-{name}"}}],
                "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
                "current-context": name,
            }
        )
    )
    return str(path)


def quota(server: ApiServer, gpus: int) -> None:
    """Kueue on the worker: ClusterQueue ``cq`` with ``gpus``, and the LocalQueue the jobs name."""
    server.emulator.put(
        "kueue.x-k8s.io",
        "v1beta1",
        "localqueues",
        {"metadata": {"name": "user-queue", "namespace": "team-a"}, "spec": {"clusterQueue": "cq"}},
    )
    server.emulator.put(
        *CQ,
        {
            "metadata": {"name": "cq"},
            "spec": {
                "resourceGroups": [
                    {
                        "flavors": [
                            {
                                "name": "default",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "64"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": gpus},
                                ],
                            }
                        ]
                    }
                ]
            },
        },
    )


def kueue_admits(server: ApiServer, name: str) -> None:
    """What Kueue on the worker does for an admitted job: a Workload, Admitted, unsuspend."""
    emu = server.emulator
    copy = emu.get(*JOBS, "team-a", name)
    assert copy is not None
    wl = f"job-{name}-{copy['metadata']['labels']['kdispatch.io/attempt']}"
    emu.put(
        *WL,
        {
            "metadata": {
                "name": wl,
                "namespace": "team-a",
                "ownerReferences": [{"kind": "Job", "name": name, "uid": copy["metadata"]["uid"]}],
            }
        },
    )
    emu.patch_status(
        *WL,
        "team-a",
        wl,
        {"conditions": [{"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}]},
    )
    emu.update(*JOBS, "team-a", name, {"spec": {"suspend": False}})
    emu.patch_status(*JOBS, "team-a", name, {"active": 1, "startTime": "2026-01-01T00:00:00Z"})


def where(servers: dict[str, ApiServer], name: str) -> dict[str, int]:
    """cluster -> attempt of the copies of ``name`` present on the workers."""
    out = {}
    for cluster, srv in servers.items():
        copy = srv.emulator.get(*JOBS, "team-a", name)
        if copy is not None:
            out[cluster] = int(copy["metadata"]["labels"]["kdispatch.io/attempt"])
    return out


async def log_entries(jlog: JetStreamLog) -> list[ev.LogEntry]:
    out: list[ev.LogEntry] = []
    async for chunk in jlog.reader.read():
        out.extend(chunk)
    return out


def decisions(entries: list[ev.LogEntry], kind: type[Any], name: str) -> list[Any]:
    return [
        e.event
        for e in entries
        if isinstance(e.event, kind) and getattr(e.event, "job", None) and e.event.job.name == name
    ]


async def explained(world: World, waiting: Any) -> Any:
    """Await ``waiting``; if it fails, print the log (heartbeats left out) to show why."""
    try:
        return await waiting
    except AssertionError:
        for e in await log_entries(world.jlog):
            if not isinstance(e.event, ev.ClusterHeartbeat):
                print("log", e.seq, str(e.event)[:300])
        raise


class World:
    def __init__(self, jlog: JetStreamLog, manager: ApiServer, workers: dict[str, ApiServer]) -> None:
        self.jlog = jlog
        self.manager = manager
        self.workers = workers

    async def submit(self, name: str, *, gpus: int = 1) -> ev.JobRef:
        """The job lands on the manager and the webhook records it (publish as the webhook does)."""
        obj = self.manager.emulator.put(*JOBS, batch_job(name, gpus=gpus))
        ref = ev.JobRef(namespace="team-a", name=name, uid=obj["metadata"]["uid"])
        submitted = ev.JobSubmitted(
            job=ref,
            pod_sets=[ev.PodSet(name="main", count=1, requests={"cpu": 500, "nvidia.com/gpu": gpus})],
            queue="user-queue",
            manifest=obj,
        )
        await self.jlog.inbox.publish(submitted, msg_id=f"webhook/{ref.uid}")
        return ref

    async def placed(self, name: str, *, attempt: int) -> str:
        async def check() -> str | None:
            got = [
                p for p in decisions(await log_entries(self.jlog), ev.Placed, name) if p.attempt == attempt
            ]
            return got[-1].cluster if got else None

        return await eventually(check, timeout_s=20, what=f"{name} placed (attempt {attempt})")


@pytest.fixture
async def world(jslog: JetStreamLog, api_servers: Any, tmp_path: Path) -> AsyncIterator[World]:
    manager: ApiServer = await api_servers("manager")
    workers: dict[str, ApiServer] = {}
    for i, name in enumerate(WORKERS):
        workers[name] = await api_servers(name, kueue=True)
        quota(workers[name], 8 - i)  # w1 has the most room: the capacity score prefers it
    config = decode_config(
        {
            "manager": {
                "id": "mgr-e2e",
                "kubeconfig": {"path": kubeconfig(tmp_path / "manager.yaml", manager, "manager")},
                "resync": "2s",
                "gcInterval": "1s",
            },
            "policy": {
                # Only w1 is ever killed (below, its own short timeout); the others must never be
                # Lost. All of this runs in one process: starved of CPU (a CI run under load), it
                # can fail to check and publish a healthy worker's heartbeat within 1.5 s.
                "workerLostTimeout": "10m",
                "requeueBackoff": "100ms",
                "profiles": [
                    {
                        "name": "default",
                        "filters": [
                            "ClusterHealth",
                            "ClusterSelector",
                            "ClusterFeasibility",
                            "ClusterHeadroom",
                        ],
                        "scores": ["CapacityScore"],
                        "strategy": {"type": "TopK", "k": 1},
                    }
                ],
            },
            "clusters": [
                {
                    "name": name,
                    "labels": {"zone": name},
                    "kubeconfig": {"path": kubeconfig(tmp_path / f"{name}.yaml", srv, name)},
                    "kueue": True,
                    "heartbeatInterval": "200ms",
                    # A killed worker refuses at once; only a healthy one, answering from this
                    # starved process, could be slower, and then it is not unreachable.
                    "heartbeatTimeout": "2s",
                    **({"workerLostTimeout": "1500ms"} if name == "w1" else {}),
                }
                for name, srv in workers.items()
            ],
        }
    )
    settings = Settings(
        loop=LoopSettings(leader_id="e2e", policy=policy_event(config.policy), idle_wait_s=0.02),
        backfill_after_s=1.0,
    )
    async with running(jslog, config, settings) as system:
        await wait_ready(system.loop, timeout_s=20)
        yield World(jslog, manager, workers)


async def test_a_job_runs_on_a_worker_reports_back_and_is_cleaned_up(world: World) -> None:
    ref = await world.submit("train")
    copies = await explained(
        world, eventually(lambda: where(world.workers, "train"), what="a copy on a worker")
    )
    assert copies == {"w1": 1}  # TopK k=1: the roomiest worker, and only there
    copy = world.workers["w1"].emulator.get(*JOBS, "team-a", "train")
    assert copy is not None and copy["spec"]["suspend"] is True and "managedBy" not in copy["spec"]
    kueue_admits(world.workers["w1"], "train")
    assert await world.placed("train", attempt=1) == "w1"
    mgr = world.manager.emulator

    def manager_job() -> dict[str, Any]:
        obj = mgr.get(*JOBS, "team-a", "train")
        assert obj is not None
        return obj

    await eventually(
        lambda: manager_job()["metadata"]["annotations"].get("kdispatch.io/cluster") == "w1",
        what="cluster annotation",
    )
    await eventually(
        lambda: manager_job().get("status", {}).get("active") == 1, what="running status synced back"
    )
    complete = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}
    world.workers["w1"].emulator.patch_status(*JOBS, "team-a", "train", complete)
    await eventually(
        lambda: manager_job().get("status", {}).get("succeeded") == 1, what="final status synced back"
    )
    await eventually(lambda: not where(world.workers, "train"), what="copy cleaned up after finishing")
    entries = await log_entries(world.jlog)
    assert [f.succeeded for f in decisions(entries, ev.Finished, "train")] == [True]
    assert manager_job()["spec"]["suspend"] is True  # the manager's own controller never runs it
    assert ref.uid == manager_job()["metadata"]["uid"]


async def test_a_lost_worker_is_replaced_and_its_stale_copy_withdrawn_when_it_returns(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    await world.submit("sim-1")
    await eventually(lambda: where(world.workers, "sim-1") == {"w1": 1}, what="copy on w1")
    kueue_admits(world.workers["w1"], "sim-1")
    assert await world.placed("sim-1", attempt=1) == "w1"
    await world.workers["w1"].kill()
    # Lost after the (short) worker-lost timeout, requeued, and placed again elsewhere
    copies = await eventually(
        lambda: {c: a for c, a in where(world.workers, "sim-1").items() if c != "w1"}, what="re-placed copy"
    )
    ((cluster, attempt),) = copies.items()
    assert attempt == 2
    kueue_admits(world.workers[cluster], "sim-1")
    assert await world.placed("sim-1", attempt=2) == cluster
    entries = await log_entries(world.jlog)
    assert any(isinstance(e.event, ev.ClusterLost) and e.event.cluster == "w1" for e in entries)
    # w1 comes back, still holding its copy of attempt 1: it is withdrawn, and only that one
    assert world.workers["w1"].emulator.get(*JOBS, "team-a", "sim-1") is not None
    await world.workers["w1"].start()
    await eventually(lambda: where(world.workers, "sim-1") == {cluster: 2}, what="stale copy on w1 removed")
    out, err = capsys.readouterr()
    assert "heartbeat_failed" in out + err  # the outage was logged ...
    assert "secret-token-of" not in out + err  # ... and no credentials with it


async def test_a_job_the_webhook_missed_is_backfilled_from_the_manager_watch(world: World) -> None:
    world.manager.emulator.put(*JOBS, batch_job("missed", gpus=2))  # never recorded by a webhook
    copies = await explained(
        world,
        eventually(lambda: where(world.workers, "missed"), timeout_s=20, what="backfilled job dispatched"),
    )
    assert list(copies.values()) == [1]
    entries = await log_entries(world.jlog)
    subs = [e.event for e in entries if isinstance(e.event, ev.JobSubmitted) and e.event.job.name == "missed"]
    assert [s.source for s in subs] == ["watch"]


async def test_a_job_admitted_by_the_real_webhook_is_dispatched(world: World, tmp_path: Path) -> None:
    """The front door too: ``python -m webhook`` as a child process gets real AdmissionReviews over
    HTTPS (mutate, then validate) and records the JobSubmitted; the job lands on the manager."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "webhook",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--nats",
        world.jlog.url,
    ]
    argv += ["--root", world.jlog.names.root, "--data-dir", str(tmp_path), "--log-level", "warning"]
    webhook = Supervised("webhook", argv)
    stop = asyncio.Event()
    child = asyncio.create_task(webhook.run(stop))
    try:
        ca = tmp_path / "webhook-tls" / "ca.crt"
        await eventually(ca.exists, timeout_s=30, what="webhook TLS material")
        async with AdmissionClient(f"https://127.0.0.1:{port}", ca_file=str(ca)) as api:
            await eventually(api.ready, timeout_s=30, what="webhook ready")
            user_job = batch_job("via-webhook")
            del user_job["spec"]["managedBy"], user_job["spec"]["selector"]
            user_job["spec"]["suspend"] = False
            user_job["metadata"]["annotations"] = {"kdispatch.io/cluster-selector": "zone=w2"}
            admitted = await api.create(user_job)
        obj = admitted.obj
        assert obj["spec"]["suspend"] is True and obj["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"
        # the pod sets the webhook computed travel with the object, for the manager watcher
        assert obj["metadata"]["annotations"]["kdispatch.io/pod-sets"] == (
            '[{"count":1,"name":"main","requests":{"cpu":500,"nvidia.com/gpu":1}}]'
        )
        world.manager.emulator.put(*JOBS, obj)  # what the API server stores after admission
        copies = await explained(
            world, eventually(lambda: where(world.workers, "via-webhook"), what="copy on w2")
        )
        assert copies == {"w2": 1}  # the selector the webhook normalized was honoured
        kueue_admits(world.workers["w2"], "via-webhook")
        assert await world.placed("via-webhook", attempt=1) == "w2"
        entries = await log_entries(world.jlog)
        subs = [
            e.event
            for e in entries
            if isinstance(e.event, ev.JobSubmitted) and e.event.job.name == "via-webhook"
        ]
        assert [(s.source, s.job.uid) for s in subs] == [("webhook", obj["metadata"]["uid"])]
    finally:
        stop.set()
        await asyncio.wait_for(child, 30)


async def kubectl(config: Path, *args: str) -> str:
    """The real kubectl against the manager stand-in; its output, or the test fails with its error."""
    proc = await asyncio.create_subprocess_exec(
        shutil.which("kubectl") or "kubectl",
        f"--kubeconfig={config}",
        f"--cache-dir={config.parent / 'kube-cache'}",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, f"kubectl {' '.join(args)}: {err.decode()}"
    return out.decode()


async def test_a_user_sees_queue_reason_and_cluster_with_kubectl(world: World, tmp_path: Path) -> None:
    """What kdispatch knows is on the user's object: ``kubectl describe job`` shows the queue and
    why it waits, ``kubectl get events`` the placement, ``-L kdispatch.io/cluster`` where it runs."""
    assert shutil.which("kubectl"), "kubectl is not installed: this test needs the real one"
    await world.submit("too-big", gpus=64)  # more than any worker has
    await world.submit("fits")
    await eventually(lambda: where(world.workers, "fits") == {"w1": 1}, what="copy on w1")
    kueue_admits(world.workers["w1"], "fits")
    assert await world.placed("fits", attempt=1) == "w1"
    mgr = world.manager.emulator

    def status(name: str) -> dict[str, Any]:
        obj = mgr.get(*JOBS, "team-a", name) or {}
        raw = ((obj.get("metadata") or {}).get("annotations") or {}).get("kdispatch.io/status")
        return json.loads(raw) if raw else {}

    await explained(
        world,
        eventually(
            lambda: status("too-big").get("phase") == "Pending" and status("fits").get("cluster") == "w1",
            what="status on the manager objects",
        ),
    )
    config = tmp_path / "kubectl.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "m", "cluster": {"server": world.manager.url}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "m", "context": {"cluster": "m", "user": "u", "namespace": "team-a"}}],
                "current-context": "m",
            }
        )
    )
    described = await kubectl(config, "describe", "job", "too-big")
    assert "queued in queue user-queue at position 1" in described  # the queue (Queued Event)
    assert re.search(r"Warning\s+Pending\s+.*no cluster fits: 3 clusters: .*nvidia.com/gpu", described), (
        described
    )
    assert '"phase":"Pending","queue":"user-queue"' in described  # the status annotation

    events = await kubectl(config, "get", "events", "--field-selector", "involvedObject.name=fits")
    assert re.search(r"Normal\s+Placed\s+job/fits\s+placed on w1 \(attempt 1\)", events), events
    assert re.search(r"Normal\s+Queued\s+job/fits\s+queued in queue user-queue", events), events
    assert "too-big" not in events  # the selector picked the one job

    listed = await kubectl(config, "get", "jobs", "-L", "kdispatch.io/cluster")
    rows = {line.split()[0]: line.split() for line in listed.splitlines()[1:]}
    assert listed.splitlines()[0].split()[-1] == "CLUSTER"  # the -L column
    assert rows["fits"][-1] == "w1" and rows["too-big"][-1] != "w1"


UNRECORDED = 12


async def test_jobs_allowed_while_the_inbox_is_unavailable_are_all_backfilled(world: World, tmp_path: Path) -> None:
    """Accepted but unrecorded (issue 18): the real webhook cannot reach the inbox when it admits
    (here NATS is not there at all: the end state of a fail-over the publish bound did not cover),
    answers allowed, and the API server stores the held jobs. Afterwards every allowed job is in
    the log, recorded by the manager watcher's backfill, and dispatched."""
    port = free_port()
    dead_nats = f"nats://127.0.0.1:{free_port()}"
    argv = [sys.executable, "-m", "webhook", "--host", "127.0.0.1", "--port", str(port), "--nats", dead_nats]
    argv += ["--root", world.jlog.names.root, "--data-dir", str(tmp_path), "--log-level", "warning"]
    argv += ["--publish-timeout", "0.2"]
    webhook = Supervised("webhook", argv)
    stop = asyncio.Event()
    child = asyncio.create_task(webhook.run(stop))
    allowed: dict[str, str] = {}  # name -> uid
    stored_ms: dict[str, int] = {}  # name -> when the API server stored it (wall clock, as log entries)
    try:
        ca = tmp_path / "webhook-tls" / "ca.crt"
        await eventually(ca.exists, timeout_s=30, what="webhook TLS material")
        async with AdmissionClient(f"https://127.0.0.1:{port}", ca_file=str(ca)) as api:

            async def answers() -> bool:
                # 503: listening, and knows NATS is not answering (a refused connection is not yet)
                return await api.ready_status() == 503

            await eventually(answers, timeout_s=30, what="webhook answering (not ready: no NATS)")
            for i in range(UNRECORDED):
                user_job = batch_job(f"unrecorded-{i}")
                del user_job["spec"]["managedBy"], user_job["spec"]["selector"]
                user_job["spec"]["suspend"] = False
                admitted = await api.create(user_job)  # allowed, though nothing was recorded
                obj = admitted.obj
                assert obj["spec"]["suspend"] is True  # held by /mutate: it waits for the dispatcher
                world.manager.emulator.put(*JOBS, obj)  # what the API server stores after admission
                allowed[obj["metadata"]["name"]] = obj["metadata"]["uid"]
                stored_ms[obj["metadata"]["name"]] = time.time_ns() // 1_000_000

        async def all_in_the_log() -> dict[str, str] | None:
            entries = await log_entries(world.jlog)
            subs = {
                e.event.job.name: (e.event.job.uid, e.event.source)
                for e in entries
                if isinstance(e.event, ev.JobSubmitted) and e.event.job.name in allowed
            }
            missing = sorted(set(allowed) - set(subs))
            return None if missing else {name: source for name, (_, source) in subs.items()}

        sources = await eventually(all_in_the_log, timeout_s=30, what=f"all {UNRECORDED} allowed jobs in the log")
        assert set(sources.values()) == {"watch"}  # not the webhook: it could not record them
        entries = await log_entries(world.jlog)
        took = sorted(
            (e.at_ms - stored_ms[e.event.job.name]) / 1000
            for e in entries
            if isinstance(e.event, ev.JobSubmitted) and e.event.job.name in allowed
        )
        print(f"backfill: stored -> JobSubmitted in the log: min {took[0]:.1f}s, median {took[len(took) // 2]:.1f}s, max {took[-1]:.1f}s (backfill_after_s=1)")
        uids = [e.event.job.uid for e in entries if isinstance(e.event, ev.JobSubmitted) and e.event.job.name in allowed]
        assert sorted(uids) == sorted(allowed.values())  # each exactly once, with the stored uid
        await eventually(
            lambda: all(where(world.workers, name) for name in allowed), timeout_s=30, what="every backfilled job dispatched"
        )
    finally:
        stop.set()
        await asyncio.wait_for(child, 30)
