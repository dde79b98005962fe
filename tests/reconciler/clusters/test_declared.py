"""Worker clusters declared as WorkerCluster objects, end to end: the kmock manager serves the CRD
shipped in deploy/base, the real ``kubectl`` applies and deletes the objects, a real nats-server
holds the log, and the reconciler runs as ``serve`` wires it.

w1 is in the config file (a small worker); w2 is a WorkerCluster applied at runtime (a roomier
one, so the capacity score prefers it once it is there).
"""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from eventlog import events as ev
from eventlog.jetstream import JetStreamLog
from eventlog.kube.names import DRAINING_TAINT
from reconciler.config import ConfigError, decode_config
from reconciler.history.replay import replay
from reconciler.policy import policy_event
from reconciler.service.clusters.objects import FINALIZER, SECRETS_NAMESPACE, declared
from reconciler.service.loop import LoopSettings, wait_ready
from reconciler.service.wiring import Settings, System, running
from tests.paths import REPO
from tests.reconciler.clusters.conftest import ApiServer
from tests.reconciler.clusters.test_e2e_kube import (
    JOBS,
    World,
    decisions,
    explained,
    kubeconfig,
    kubectl,
    kueue_admits,
    log_entries,
    quota,
    where,
)
from tests.waiting import eventually

CRD = REPO / "deploy" / "base" / "workercluster-crd.yaml"
SECRETS = ("", "v1", "secrets")


def serve_crd(server: ApiServer) -> tuple[str, str, str]:
    """Declare the shipped CRD's resource on the manager stand-in, as installing it would."""
    crd = yaml.safe_load(CRD.read_text())["spec"]
    (version,) = [v["name"] for v in crd["versions"] if v["served"]]
    key = (crd["group"], version, crd["names"]["plural"])
    server.emulator.serve(*key, kind=crd["names"]["kind"], namespaced=crd["scope"] == "Namespaced")
    server.emulator.serve(*SECRETS, kind="Secret")
    return key


class Fleet(World):
    def __init__(self, system: System, tmp: Path, wc: tuple[str, str, str], *args: Any) -> None:
        super().__init__(*args)
        self.system = system
        self.tmp = tmp
        self.wc = wc
        self.kubectl_config = tmp / "kubectl.yaml"
        kubeconfig(self.kubectl_config, self.manager, "manager")

    def secret(self, name: str, worker: ApiServer) -> None:
        """Step 1 of docs/deploy.md: the worker's kubeconfig as a Secret (here put directly)."""
        text = kubeconfig(self.tmp / f"{name}.kubeconfig", worker, name)
        data = base64.b64encode(Path(text).read_bytes()).decode()
        self.manager.emulator.put(
            *SECRETS, {"metadata": {"name": f"{name}-kubeconfig", "namespace": SECRETS_NAMESPACE}, "data": {"kubeconfig": data}}
        )

    async def apply(self, name: str, **spec: Any) -> None:
        """Step 2: ``kubectl apply`` of the WorkerCluster."""
        obj = {
            "apiVersion": "kdispatch.io/v1alpha1",
            "kind": "WorkerCluster",
            "metadata": {"name": name},
            "spec": {"kubeConfig": {"locationType": "Secret", "location": f"{name}-kubeconfig"}, **spec},
        }
        path = self.tmp / f"{name}-wc.yaml"
        path.write_text(yaml.safe_dump(obj))
        await kubectl(self.kubectl_config, "apply", "--validate=false", "-f", str(path))

    def object(self, name: str) -> dict[str, Any] | None:
        return self.manager.emulator.get(*self.wc, "", name)

    def phase(self, name: str) -> str:
        return str(((self.object(name) or {}).get("status") or {}).get("phase", ""))


@pytest.fixture
async def fleet(jslog: JetStreamLog, api_servers: Any, tmp_path: Path) -> AsyncIterator[Fleet]:
    assert shutil.which("kubectl"), "kubectl is not installed: this test needs the real one"
    manager: ApiServer = await api_servers("manager")
    wc = serve_crd(manager)
    workers = {"w1": await api_servers("w1", kueue=True), "w2": await api_servers("w2", kueue=True)}
    quota(workers["w1"], 2)
    quota(workers["w2"], 8)
    config = decode_config(
        {
            "manager": {
                "id": "mgr-declared",
                "kubeconfig": {"path": kubeconfig(tmp_path / "manager.yaml", manager, "manager")},
                "resync": "2s",
                "gcInterval": "1s",
            },
            "policy": {"workerLostTimeout": "20s", "requeueBackoff": "100ms"},
            "clusters": [
                {
                    "name": "w1",
                    "kubeconfig": {"path": kubeconfig(tmp_path / "w1.yaml", workers["w1"], "w1")},
                    "kueue": True,
                    "heartbeatInterval": "200ms",
                    "heartbeatTimeout": "2s",
                }
            ],
        }
    )
    settings = Settings(
        loop=LoopSettings(leader_id="declared", policy=policy_event(config.policy), idle_wait_s=0.02),
        backfill_after_s=1.0,
    )
    async with running(jslog, config, settings) as system:
        await wait_ready(system.loop, timeout_s=20)
        yield Fleet(system, tmp_path, wc, jslog, manager, workers)


def capacity_reports(entries: list[ev.LogEntry], cluster: str) -> list[int]:
    """Seqs of the entries that told the log a capacity of ``cluster`` it did not have before."""
    out, last = [], None
    for e in entries:
        if isinstance(e.event, ev.ClusterRegistered | ev.ClusterUpdated) and e.event.cluster == cluster:
            if e.event.capacity and e.event.capacity != last:
                out.append(e.seq)
            last = e.event.capacity or last
    return out


def nominated_on(entries: list[ev.LogEntry], cluster: str) -> list[tuple[int, str]]:
    return [
        (e.seq, e.event.job.name)
        for e in entries
        if isinstance(e.event, ev.Nominated) and cluster in e.event.clusters
    ]


async def removed_in_log(fleet: Fleet, cluster: str) -> list[ev.LogEntry] | None:
    """The log's entries once it has the cluster's ClusterRemoved (else None)."""
    entries = await log_entries(fleet.jlog)
    removed = any(isinstance(e.event, ev.ClusterRemoved) and e.event.cluster == cluster for e in entries)
    return entries if removed else None


def first(entries: list[ev.LogEntry], kind: type[Any], cluster: str, *, where: Any = lambda _e: True) -> int:
    seqs = [e.seq for e in entries if isinstance(e.event, kind) and e.event.cluster == cluster and where(e.event)]
    assert seqs, f"no {kind.__name__} for {cluster}"
    return seqs[0]


async def test_a_worker_cluster_applied_at_runtime_takes_work_within_one_capacity_report(fleet: Fleet) -> None:
    fleet.secret("w2", fleet.workers["w2"])
    await fleet.apply("w2", labels={"zone": "b"}, workerLostTimeout="5s", heartbeatInterval="200ms")
    await explained(fleet, eventually(lambda: fleet.phase("w2") == "Ready", what="w2 Ready in its status"))
    await fleet.submit("big", gpus=4)  # only w2 has room for it
    copies = await explained(fleet, eventually(lambda: where(fleet.workers, "big"), what="big placed"))
    assert copies == {"w2": 1}
    entries = await log_entries(fleet.jlog)
    reports = capacity_reports(entries, "w2")
    nominated = [seq for seq, name in nominated_on(entries, "w2") if name == "big"]
    assert reports and nominated and reports[0] < nominated[0]
    assert [r for r in reports if r < nominated[0]] == reports[:1], "placed before a second capacity report"
    registered = [e.event for e in entries if isinstance(e.event, ev.ClusterRegistered) and e.event.cluster == "w2"]
    assert registered[0].labels == {"zone": "b"} and registered[0].worker_lost_timeout_ms == 5000
    obj = fleet.object("w2")
    assert obj is not None and FINALIZER in obj["metadata"]["finalizers"]
    jobs = lambda: ((fleet.object("w2") or {}).get("status") or {}).get("jobs")  # noqa: E731
    await eventually(lambda: jobs() == 1, what="the job counted in w2's status")
    # (kmock renders no server-side printer columns: the CRD's columns are these same fields)
    columns = "NAME:.metadata.name,PHASE:.status.phase,JOBS:.status.jobs"
    listed = await kubectl(fleet.kubectl_config, "get", "workerclusters", "-o", f"custom-columns={columns}")
    assert listed.split("\n")[1].split() == ["w2", "Ready", "1"], listed

    # Changed labels: ClusterUpdated, keeping the capacity the log has; no second adapter.
    await fleet.apply("w2", labels={"zone": "c"}, workerLostTimeout="5s", heartbeatInterval="200ms")

    async def relabelled() -> list[ev.ClusterUpdated]:
        return [
            e.event
            for e in await log_entries(fleet.jlog)
            if isinstance(e.event, ev.ClusterUpdated) and e.event.cluster == "w2" and e.event.labels == {"zone": "c"}
        ]

    updates = await explained(fleet, eventually(relabelled, what="w2 relabelled in the log"))
    assert updates[0].capacity == {"cpu": 64000, "nvidia.com/gpu": 8}
    entries = await log_entries(fleet.jlog)
    assert len([e for e in entries if isinstance(e.event, ev.ClusterRegistered) and e.event.cluster == "w2"]) == 1


async def test_a_deleted_worker_cluster_drains_leaving_running_copies_then_is_removed(fleet: Fleet) -> None:
    fleet.secret("w2", fleet.workers["w2"])
    await fleet.apply("w2", heartbeatInterval="200ms")
    await explained(fleet, eventually(lambda: fleet.phase("w2") == "Ready", what="w2 Ready in its status"))
    await fleet.submit("running", gpus=4)
    await explained(fleet, eventually(lambda: where(fleet.workers, "running") == {"w2": 1}, what="copy on w2"))
    kueue_admits(fleet.workers["w2"], "running")
    assert await fleet.placed("running", attempt=1) == "w2"

    await kubectl(fleet.kubectl_config, "delete", "workercluster", "w2", "--wait=false")
    await explained(fleet, eventually(lambda: fleet.phase("w2") == "Draining", what="w2 Draining in its status"))
    assert (fleet.object("w2") or {}).get("status", {}).get("jobs") == 1
    await fleet.submit("after", gpus=1)  # w2 is the roomier, but draining: w1 takes it
    await explained(fleet, eventually(lambda: where(fleet.workers, "after") == {"w1": 1}, what="after on w1"))
    assert where(fleet.workers, "running") == {"w2": 1}, "the running copy was left alone"
    assert fleet.object("w2") is not None, "held by the finalizer while a copy runs there"

    complete = {"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 1}
    fleet.workers["w2"].emulator.patch_status(*JOBS, "team-a", "running", complete)
    await explained(fleet, eventually(lambda: fleet.object("w2") is None, timeout_s=30, what="w2 drained and deleted"))
    # The finalizer goes once the inbox holds ClusterRemoved; the leader sequences it into the log.
    entries = await eventually(lambda: removed_in_log(fleet, "w2"), what="ClusterRemoved in the log")
    drained_at = first(entries, ev.ClusterUpdated, "w2", where=lambda e: any(t.key == DRAINING_TAINT for t in e.taints))
    removed_at = first(entries, ev.ClusterRemoved, "w2")
    finished = [e.seq for e in entries if isinstance(e.event, ev.Finished) and e.event.job.name == "running"]
    assert drained_at < finished[0] < removed_at
    assert [seq for seq, _ in nominated_on(entries, "w2") if seq > drained_at] == [], "nothing new after the drain"
    assert [f.succeeded for f in decisions(entries, ev.Finished, "running")] == [True]
    replayed = await replay(fleet.jlog.reader, verify=True)  # the drain is in the log: decided alike
    assert replayed.mismatch is None and replayed.verified_batches > 0


async def test_withdraw_policy_moves_running_copies_elsewhere(fleet: Fleet) -> None:
    fleet.secret("w2", fleet.workers["w2"])
    await fleet.apply("w2", heartbeatInterval="200ms", drainPolicy="Withdraw")
    await explained(fleet, eventually(lambda: fleet.phase("w2") == "Ready", what="w2 Ready in its status"))
    await fleet.submit("moved", gpus=1)
    await explained(fleet, eventually(lambda: where(fleet.workers, "moved") == {"w2": 1}, what="copy on w2"))
    kueue_admits(fleet.workers["w2"], "moved")
    assert await fleet.placed("moved", attempt=1) == "w2"

    await kubectl(fleet.kubectl_config, "delete", "workercluster", "w2", "--wait=false")
    await explained(
        fleet, eventually(lambda: where(fleet.workers, "moved") == {"w1": 2}, timeout_s=30, what="withdrawn from w2, on w1")
    )
    await explained(fleet, eventually(lambda: fleet.object("w2") is None, timeout_s=30, what="w2 removed"))
    entries = await eventually(lambda: removed_in_log(fleet, "w2"), what="ClusterRemoved in the log")
    withdrawn = [e.event for e in entries if isinstance(e.event, ev.Withdrawn) and e.event.job.name == "moved"]
    assert [(w.cluster, w.attempt) for w in withdrawn] == [("w2", 1)]
    replayed = await replay(fleet.jlog.reader, verify=True)
    assert replayed.mismatch is None and replayed.verified_batches > 0


async def test_a_secret_created_after_its_worker_cluster_is_picked_up(fleet: Fleet) -> None:
    await fleet.apply("w2", heartbeatInterval="200ms")
    await explained(fleet, eventually(lambda: fleet.phase("w2") == "Error", what="w2 Error: no Secret"))
    status = (fleet.object("w2") or {})["status"]
    assert "w2-kubeconfig" in status["message"], status
    fleet.secret("w2", fleet.workers["w2"])
    await explained(fleet, eventually(lambda: fleet.phase("w2") == "Ready", timeout_s=30, what="w2 Ready"))


def test_a_bad_spec_names_the_field_and_what_is_accepted() -> None:
    obj = {"metadata": {"name": "w9", "uid": "u"}, "spec": {"kubeConfig": {"location": "s"}, "drainPolicy": "Evict"}}
    with pytest.raises(ConfigError, match=r"\$\.spec\.drainPolicy: 'Evict' is not a drain policy; accepted: Leave, Withdraw"):
        declared(obj)
    obj["spec"] = {"kubeConfig": {"location": "s"}, "lables": {}}
    with pytest.raises(ConfigError, match=r"unknown field `lables` \(did you mean `labels`\?\)"):
        declared(obj)
    obj["spec"] = {"kubeConfig": {"location": "s"}, "workerLostTimeout": "5 min"}
    with pytest.raises(ConfigError, match=r"\$\.spec\.workerLostTimeout: "):
        declared(obj)
    obj["spec"] = {"kubeConfig": {"location": "s"}, "workerLostTimeout": "90s", "labels": {"a": "b"}}
    d = declared(obj)
    assert d.config.worker_lost_timeout_ms == 90_000 and d.drain_policy == "Leave" and not d.deleting
    assert d.config.kubeconfig is not None and d.config.kubeconfig.secret_ref is not None
    assert (d.config.kubeconfig.secret_ref.namespace, d.config.kubeconfig.secret_ref.name) == (SECRETS_NAMESPACE, "s")
    assert json.loads(json.dumps(d.config.labels)) == {"a": "b"}


async def test_giving_up_on_a_drain_removes_the_cluster_and_requeues_its_jobs(fleet: Fleet) -> None:
    """The escape hatch docs/deploy.md gives: the finalizer removed by hand ends the drain; the
    cluster is removed at once and what ran there is placed elsewhere."""
    fleet.secret("w2", fleet.workers["w2"])
    await fleet.apply("w2", heartbeatInterval="200ms")
    await explained(fleet, eventually(lambda: fleet.phase("w2") == "Ready", what="w2 Ready in its status"))
    await fleet.submit("stuck", gpus=1)
    await explained(fleet, eventually(lambda: where(fleet.workers, "stuck") == {"w2": 1}, what="copy on w2"))
    kueue_admits(fleet.workers["w2"], "stuck")
    assert await fleet.placed("stuck", attempt=1) == "w2"
    await kubectl(fleet.kubectl_config, "delete", "workercluster", "w2", "--wait=false")
    await explained(fleet, eventually(lambda: fleet.phase("w2") == "Draining", what="w2 Draining"))
    patch = '{"metadata":{"finalizers":null}}'
    await kubectl(fleet.kubectl_config, "patch", "workercluster", "w2", "--type=merge", "-p", patch)
    assert fleet.object("w2") is None
    await explained(
        fleet, eventually(lambda: where(fleet.workers, "stuck").get("w1") == 2, timeout_s=30, what="re-placed on w1")
    )
    entries = await log_entries(fleet.jlog)
    requeued = [e.event for e in entries if isinstance(e.event, ev.Requeued) and e.event.job.name == "stuck"]
    assert [r.reason for r in requeued] == ["ClusterRemoved"]


async def test_a_worker_cluster_named_like_a_config_cluster_is_an_error_not_a_second_adapter(fleet: Fleet) -> None:
    fleet.secret("w1", fleet.workers["w1"])
    await fleet.apply("w1")
    await explained(fleet, eventually(lambda: fleet.phase("w1") == "Error", what="w1's object in Error"))
    assert "config file declares a cluster 'w1' too" in (fleet.object("w1") or {})["status"]["message"]
    assert FINALIZER not in ((fleet.object("w1") or {})["metadata"].get("finalizers") or [])
    entries = await log_entries(fleet.jlog)
    assert len([e for e in entries if isinstance(e.event, ev.ClusterRegistered) and e.event.cluster == "w1"]) == 1
