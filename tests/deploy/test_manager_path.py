"""The manager side as deployed, end to end on this machine: the webhook and the reconciler
containers (the Deployments' commands and args, the shipped config, the certificate made as
docs/deploy.md says for overlays/self-signed) on the NATS cluster of deploy/nats.

The reconciler must answer its probe, create its streams at 3 replicas, lead and record the
configured policy; the webhook must pass its probes over HTTPS verified for the Service's DNS
name. Then the test plays the API server: a Job's CREATE goes to /mutate and then /validate,
routed as the webhook configurations route it; the leader must record the submission and decide
a placement on a registered worker. Both stop cleanly on SIGTERM."""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from eventlog import events as ev
from eventlog.jetstream import connect
from tests.deploy import kustomize
from tests.deploy.admission import entry_calls_webhook
from tests.deploy.conftest import find, one, rendered
from tests.deploy.natscluster import NatsCluster, free_ports
from tests.deploy.processes import (
    OVERLAY,
    SERVICE_HOST,
    Running,
    container,
    make_certs,
    resolve,
    serve_argv,
    shipped_config,
    tls_context,
    wait_status,
    webhook_argv,
)
from tests.paths import MANIFESTS
from tests.waiting import Unmet, eventually

MANIFEST = MANIFESTS / "kueue" / "jobs" / "sample-job.yaml"
NAMESPACE = {"kubernetes.io/metadata.name": "team-a", "kdispatch.io/enabled": "true"}


def submitted_job() -> dict[str, Any]:
    """Kueue's sample Job (from the corpus when present), as a user in team-a submits it."""
    if MANIFEST.is_file():
        job: dict[str, Any] = yaml.safe_load(MANIFEST.read_text())
    else:
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"labels": {"kueue.x-k8s.io/queue-name": "user-queue"}},
            "spec": {
                "parallelism": 3,
                "completions": 3,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
                        ],
                    }
                },
            },
        }
    meta = job["metadata"]
    meta.pop("generateName", None)
    meta.update(name="hello", namespace="team-a", uid="6f1c2c55-0000-4000-8000-000000000001")
    meta.setdefault("annotations", {})["kdispatch.io/cluster-selector"] = "kdispatch.io/gpu=a100"
    return job


def review(obj: dict[str, Any], uid: str) -> bytes:
    group, _, version = obj["apiVersion"].rpartition("/")
    request = {
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "resource": {"group": group, "version": version, "resource": "jobs"},
        "operation": "CREATE",
        "namespace": obj["metadata"]["namespace"],
        "name": obj["metadata"]["name"],
        "userInfo": {"username": "alice"},
        "object": obj,
        "dryRun": False,
    }
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()


def post(url: str, body: bytes, context: Any) -> dict[str, Any]:
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer["response"]


def entry_path(kind: str, obj: dict[str, Any]) -> str:
    """The path the webhook configuration routes this CREATE to (the entry that matches it)."""
    config = one(rendered(OVERLAY), kind, "kdispatch")
    paths = {
        e["clientConfig"]["service"]["path"]
        for e in config["webhooks"]
        if entry_calls_webhook(e, operation="CREATE", obj=obj, namespace_labels=NAMESPACE)
    }
    assert len(paths) == 1, f"{kind}: {paths}"
    return paths.pop()


async def register_worker(nats: NatsCluster, url: str, root: str) -> None:
    """What the reconciler's cluster adapter reports for worker-a of the shipped config."""
    config = yaml.safe_load(shipped_config_text())
    (worker,) = config["clusters"]
    jlog = await connect(url, replicas=3, root=root, **nats.options("reconciler"))
    try:
        await jlog.inbox.publish(
            ev.ClusterRegistered(
                cluster=worker["name"],
                labels=worker["labels"],
                capacity={"cpu": 64_000, "memory": 256 << 30},
            ),
            msg_id="register-worker-a",
        )
        await jlog.inbox.publish(ev.ClusterHeartbeat(cluster=worker["name"]), msg_id="heartbeat-worker-a")
    finally:
        await jlog.close()


def shipped_config_text() -> str:
    (configmap,) = [
        o
        for o in find(rendered(OVERLAY), "ConfigMap")
        if o["metadata"]["name"].startswith("kdispatch-config-")
    ]
    text: str = configmap["data"]["config.yaml"]
    return text


async def recorded_policy(
    nats: NatsCluster, url: str, root: str, *, timeout_s: float
) -> tuple[ev.PolicyLoaded, int, int]:
    """The leader's PolicyLoaded, and the replicas of the log and inbox streams (read as the
    read-only user)."""
    jlog = await connect(url, replicas=3, root=root, **nats.options("reader"), create_streams=False)
    try:

        async def policy() -> ev.PolicyLoaded | None:
            async for batch in jlog.reader.read(from_seq=1):
                for entry in batch:
                    if isinstance(entry.event, ev.PolicyLoaded):
                        return entry.event
            return None

        loaded = await eventually(policy, timeout_s=timeout_s, interval_s=0.3, what="PolicyLoaded in the log")
        log_info = await jlog.js.stream_info(jlog.names.log_stream)
        inbox_info = await jlog.js.stream_info(jlog.names.inbox_stream)
        return loaded, log_info.config.num_replicas or 0, inbox_info.config.num_replicas or 0
    finally:
        await jlog.close()


async def decisions_about(
    nats: NatsCluster, url: str, root: str, name: str, *, timeout_s: float
) -> list[ev.LogEntry]:
    """The log entries about team-a/<name>, once a decision about it was appended."""
    jlog = await connect(url, replicas=3, root=root, **nats.options("reader"), create_streams=False)
    try:

        async def decided() -> list[ev.LogEntry] | Unmet:
            about = []
            async for batch in jlog.reader.read(from_seq=1):
                about += [e for e in batch if getattr(getattr(e.event, "job", None), "name", None) == name]
            kinds = [type(e.event).__name__ for e in about]
            return about if any(ev.is_decision(e.event) for e in about) else Unmet(kinds)

        result: list[ev.LogEntry] = await eventually(
            decided, timeout_s=timeout_s, interval_s=0.3, what=f"a decision about team-a/{name}"
        )
        return result
    finally:
        await jlog.close()


def test_a_job_goes_from_the_webhook_to_a_decision(tmp_path: Path, shipped_nats: NatsCluster) -> None:
    # The users' permissions are for the production root (deploy/nats/auth.conf); this NATS
    # cluster is the session's own, and this is the only test on it.
    log_root = "kd"
    urls = shipped_nats.urls
    certs = make_certs(tmp_path / "certs")
    shipped = shipped_config(tmp_path / "shipped.yaml").read_text()
    config = tmp_path / "config.yaml"  # as the reconciler pod sees it (its own user and cert)
    config.write_text(shipped_nats.config_for(shipped, "reconciler"))
    webhook_config = tmp_path / "webhook-config.yaml"  # as the webhook pod sees it
    webhook_config.write_text(shipped_nats.config_for(shipped, "webhook"))
    metrics_port, webhook_port = free_ports(2)  # two picks one after the other can be the same port
    serve = Running(
        serve_argv(config=config, nats_url=urls[0], metrics_port=metrics_port, root=log_root),
        tmp_path / "serve.log",
    )
    webhook: Running | None = None
    try:
        # One at a time: two clients creating the same R3 streams at once can both time out on a
        # fresh cluster (reported to the log's owners); in Kubernetes the pod that lost restarts.
        # The reconciler Deployment's probe path, on its metrics port argument.
        wait_status(f"http://127.0.0.1:{metrics_port}/healthz", context=None, proc=serve.proc, timeout_s=60)
        policy, log_replicas, inbox_replicas = asyncio.run(
            recorded_policy(shipped_nats, urls[2], log_root, timeout_s=60)
        )
        raw = yaml.safe_load(config.read_text())
        assert (log_replicas, inbox_replicas) == (3, 3), "streams replicated on the three servers"
        assert [p.name for p in policy.profiles] == [p["name"] for p in raw["policy"]["profiles"]]
        assert policy.priority_classes == raw["policy"]["priorityClasses"]
        webhook = Running(
            webhook_argv(
                port=webhook_port,
                nats_url=urls[1],
                data_dir=tmp_path / "data",
                certs=certs,
                config=webhook_config,
                root=log_root,
            ),
            tmp_path / "webhook.log",
        )
        context = tls_context(certs / "ca.crt")
        base = f"https://{SERVICE_HOST}:{webhook_port}"
        with resolve({SERVICE_HOST, "localhost.invalid.kdispatch"}):
            # The webhook Deployment's probes, over HTTPS verified for the Service's DNS name with
            # the CA the docs patch into caBundle: what the API server checks before a review.
            probes = container("kdispatch-webhook")
            for probe in ("readinessProbe", "livenessProbe"):
                url = base + probes[probe]["httpGet"]["path"]
                assert wait_status(url, context=context, proc=webhook.proc, timeout_s=60) == 200
            with pytest.raises(urllib.error.URLError, match=r"certificate|hostname"):
                urllib.request.urlopen(
                    f"https://localhost.invalid.kdispatch:{webhook_port}/healthz", context=context, timeout=5
                )
            asyncio.run(register_worker(shipped_nats, urls[2], log_root))

            job = submitted_job()
            mutated = post(
                base + entry_path("MutatingWebhookConfiguration", job), review(job, "review-1"), context
            )
            assert mutated["allowed"] is True and mutated["uid"] == "review-1", mutated
            patched = json.loads(json.dumps(job))
            kustomize.json6902(patched, json.loads(base64.b64decode(mutated["patch"])))
            assert patched["spec"]["suspend"] is True
            assert patched["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"
            assert "kdispatch.io/placement" in patched["metadata"]["annotations"]

            validated = post(
                base + entry_path("ValidatingWebhookConfiguration", patched),
                review(patched, "review-2"),
                context,
            )
            assert validated["allowed"] is True, validated

        about = asyncio.run(decisions_about(shipped_nats, urls[2], log_root, "hello", timeout_s=60))
        submitted = [e.event for e in about if isinstance(e.event, ev.JobSubmitted)]
        assert len(submitted) == 1 and submitted[0].job.uid == job["metadata"]["uid"]
        assert submitted[0].placement.cluster_selector == {"kdispatch.io/gpu": "a100"}
        nominated = [e.event for e in about if isinstance(e.event, ev.Nominated)]
        assert nominated and nominated[0].clusters == ["worker-a"], [type(e.event).__name__ for e in about]
    finally:
        codes = (webhook.stop() if webhook else None, serve.stop())
    assert webhook is not None and codes == (0, 0), webhook.tail() + serve.tail()
