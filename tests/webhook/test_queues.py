"""Admission with a queue configuration, over real HTTPS with a real nats-server behind it.

The webhook server (webhook/server.py with a NatsLink and the TLS context, as ``python -m webhook``
assembles them) runs in a thread of this process, so the test can hand it a ``QueuesConfigured``
directly; ``python -m webhook --queues PATH`` loads the same from Kueue YAML (the last test).
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from eventlog import events as ev
from eventlog.embedded import free_port
from eventlog.kube import names
from tests.webhook.conftest import review, start_webhook
from tests.webhook.test_server import _inbox
from webhook import admit, jsonpatch
from webhook.http1 import Listener
from webhook.nats_link import NatsLink
from webhook.review import decode_review
from webhook.server import WebhookServer
from webhook.tls import DEFAULT_SANS, CertFiles, self_signed

ALL = ev.LabelSelector()
QUEUES = ev.QueuesConfigured(
    cluster_queues=[
        ev.ClusterQueueSpec(name="cq-a", namespace_selector=ev.LabelSelector(match_labels={"team": "a"})),
        ev.ClusterQueueSpec(name="cq-shared", namespace_selector=ALL, allowed_priority_classes=["low", "normal"]),
        ev.ClusterQueueSpec(name="cq-held", namespace_selector=ALL, stop_policy="Hold"),
    ],
    local_queues=[
        ev.LocalQueueSpec(namespace="team-a", name="training", cluster_queue="cq-a"),
        ev.LocalQueueSpec(namespace="team-a", name="default", cluster_queue="cq-shared"),
        ev.LocalQueueSpec(namespace="team-b", name="training", cluster_queue="cq-a"),
        ev.LocalQueueSpec(namespace="team-b", name="batch", cluster_queue="cq-shared"),
        ev.LocalQueueSpec(namespace="team-b", name="paused", cluster_queue="cq-held"),
    ],
    priority_classes={"low": 10, "normal": 100, "high": 1000},
    namespaces={"team-a": {"team": "a"}, "team-b": {"team": "b"}},
    source="test",
)
APISERVER_TIMEOUT = aiohttp.ClientTimeout(total=10)


@dataclass
class QueueWebhook:
    port: int
    ca: Path
    root: str

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"


def _serve(hook: QueueWebhook, *, nats_url: str, data_dir: Path, cert: Path, key: Path, ready: threading.Event, stop: list[Any]) -> None:
    async def main() -> None:
        link = NatsLink(nats_url, data_dir=data_dir, root=hook.root)
        link.start()
        await link.wait_connected()
        server = WebhookServer(settings=admit.Settings(queues=QUEUES), inbox=link.inbox, nats_ready=link.ready)
        listener = Listener(server, max_connections=64, keepalive_s=30, handshake_timeout_s=10)
        await listener.start("127.0.0.1", hook.port, ssl_context=CertFiles(cert, key).context)
        stopping = asyncio.Event()
        stop.append((asyncio.get_running_loop(), stopping))
        ready.set()
        await stopping.wait()
        listener.stop_accepting()
        await server.wait_idle()
        await listener.close()
        await link.close()

    asyncio.run(main())


@pytest.fixture(scope="module")
def hook(nats_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[QueueWebhook]:
    data_dir = tmp_path_factory.mktemp("queues-webhook")
    ca, cert, key = self_signed(data_dir / "webhook-tls", names=list(DEFAULT_SANS))
    out = QueueWebhook(port=free_port(), ca=ca, root=f"whq{uuid.uuid4().hex[:10]}")
    ready, stop = threading.Event(), []
    thread = threading.Thread(
        target=_serve, args=(out,), kwargs={"nats_url": nats_url, "data_dir": data_dir, "cert": cert, "key": key, "ready": ready, "stop": stop}
    )
    thread.start()
    try:
        assert ready.wait(60), "the webhook did not start"
        yield out
    finally:
        if stop:
            loop, stopping = stop[0]
            loop.call_soon_threadsafe(stopping.set)
        thread.join(30)


async def _post(hook: QueueWebhook, path: str, body: bytes) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=str(hook.ca))
    async with (
        aiohttp.ClientSession(timeout=APISERVER_TIMEOUT) as session,
        session.post(hook.url + path, data=body, ssl=context) as response,
    ):
        assert response.status == 200
        answer: dict[str, Any] = json.loads(await response.read())
        return answer["response"]  # type: ignore[no-any-return]


def _job(name: str, *, namespace: str = "team-a", queue: str | None = "training", priority_class: str | None = None) -> dict[str, Any]:
    labels = {names.QUEUE_LABEL: queue} if queue is not None else {}
    if priority_class is not None:
        labels[names.PRIORITY_CLASS_LABEL] = priority_class
    annotations = {} if queue is not None else {"kdispatch.io/cluster-names": "east"}  # opted in without the label
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
        "spec": {
            "parallelism": 2,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}},
        },
    }


def _held(obj: dict[str, Any], *, uid: str) -> dict[str, Any]:
    """The object as a webhook without a queue config held it: what /validate sees when the
    queue config changed between /mutate and /validate."""
    _, request = decode_review(review(obj, uid="held"))
    outcome = admit.mutate(request, admit.Settings())
    assert outcome.allowed and outcome.response.patch is not None
    patched = jsonpatch.apply(obj, json.loads(base64.b64decode(outcome.response.patch)))
    patched["metadata"]["uid"] = uid
    return patched


async def _admit(hook: QueueWebhook, obj: dict[str, Any], *, uid: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """/mutate, the patch applied, name and uid filled in, /validate: (the stored object, the answer)."""
    answer = await _post(hook, "/mutate", review(obj, uid=f"m-{uid}"))
    assert answer["allowed"], answer
    patched = jsonpatch.apply(obj, json.loads(base64.b64decode(answer["patch"])))
    patched["metadata"]["uid"] = f"obj-{uid}"
    answer = await _post(hook, "/validate", review(patched, uid=uid))
    assert answer["allowed"], answer
    return patched, answer


async def _submitted(nats_url: str, hook: QueueWebhook, namespace: str, name: str) -> list[ev.Event]:
    return [e for e, _ in await _inbox(nats_url, hook.root, subject=f"{hook.root}.in.job.*.{namespace}.{name}")]


async def test_an_allowed_job_records_its_cluster_queue_and_priority(hook: QueueWebhook, nats_url: str) -> None:
    obj = _job("ok-1", priority_class="high")
    stored, _ = await _admit(hook, obj, uid="q-ok-1")
    [event] = await _submitted(nats_url, hook, "team-a", "ok-1")
    assert isinstance(event, ev.JobSubmitted)
    assert (event.queue, event.cluster_queue, event.priority_class, event.priority) == ("training", "cq-a", "high", 1000)
    # the stamp the manager watcher reads back carries the configured value too
    assert json.loads(stored["metadata"]["annotations"]["kdispatch.io/priority"]) == {"class": "high", "value": 1000}


async def test_a_job_without_the_queue_label_goes_to_the_default_queue(hook: QueueWebhook, nats_url: str) -> None:
    await _admit(hook, _job("ok-2", queue=None, priority_class="normal"), uid="q-ok-2")
    [event] = await _submitted(nats_url, hook, "team-a", "ok-2")
    assert isinstance(event, ev.JobSubmitted)
    assert (event.queue, event.cluster_queue, event.priority) == (None, "cq-shared", 100)


async def test_a_stopped_queue_accepts_the_job_with_a_warning(hook: QueueWebhook, nats_url: str) -> None:
    _, answer = await _admit(hook, _job("ok-3", namespace="team-b", queue="paused"), uid="q-ok-3")
    assert any('ClusterQueue "cq-held" is stopped (stopPolicy Hold)' in w for w in answer["warnings"])
    [event] = await _submitted(nats_url, hook, "team-b", "ok-3")
    assert isinstance(event, ev.JobSubmitted) and event.cluster_queue == "cq-held"


DENIALS = [
    pytest.param({"queue": "trainig"}, 422, "queue-not-found", ['no LocalQueue "trainig" in namespace "team-a"', 'did you mean "training"?'], id="queue-not-found"),
    pytest.param(
        {"namespace": "team-c"}, 422, "queue-not-found", ['namespace "team-c" has no LocalQueue', 'there is one in namespaces "team-a", "team-b"'], id="namespace-without-queues"
    ),
    pytest.param(
        {"namespace": "team-b", "queue": None},
        422,
        "no-default-queue",
        ['Add the label kueue.x-k8s.io/queue-name: <one of "batch", "paused">', 'add a LocalQueue named "default" in namespace "team-b"'],
        id="no-default-queue",
    ),
    pytest.param(
        {"namespace": "team-b"}, 403, "namespace-not-selected", ['whose namespaceSelector {team=a} does not select namespace "team-b"'], id="namespace-not-selected"
    ),
    pytest.param(
        {"priority_class": "hihg"}, 422, "priority-class-not-found", ['"hihg" (label kueue.x-k8s.io/priority-class)', 'did you mean "high"?'], id="class-not-found"
    ),
    pytest.param(
        {"queue": None, "priority_class": "high"},
        403,
        "priority-class-not-allowed",
        ['ClusterQueue "cq-shared" (of LocalQueue "team-a/default") does not allow priority class "high"', 'it allows "low", "normal"'],
        id="class-not-allowed",
    ),
]


@pytest.mark.parametrize(("job", "code", "reason", "fragments"), DENIALS)
async def test_denials_at_mutate_and_validate(
    hook: QueueWebhook, nats_url: str, job: dict[str, Any], code: int, reason: str, fragments: list[str]
) -> None:
    name = f"deny-{reason}-{uuid.uuid4().hex[:4]}"
    obj = _job(name, **job)
    namespace = obj["metadata"]["namespace"]
    for path, sent in (("/mutate", obj), ("/validate", _held(obj, uid=f"obj-{name}"))):
        answer = await _post(hook, path, review(sent, uid=f"{path}-{name}"))
        assert answer["allowed"] is False, (path, answer)
        status = answer["status"]
        assert status["code"] == code and status["reason"] == ("Forbidden" if code == 403 else "Invalid")
        for fragment in fragments:
            assert fragment in status["message"], (path, status["message"])
    assert await _submitted(nats_url, hook, namespace, name) == []
    async with aiohttp.ClientSession() as session, session.get(hook.url + "/metrics", ssl=False) as response:
        metrics = await response.text()
    assert f'kdispatch_webhook_denials_total{{endpoint="validate",reason="{reason}"}}' in metrics


async def test_a_dry_run_is_denied_alike(hook: QueueWebhook) -> None:
    held = _held(_job("dry", queue="nope"), uid="obj-dry")
    answer = await _post(hook, "/validate", review(held, uid="q-dry", dry_run=True))
    assert answer["allowed"] is False and answer["status"]["code"] == 422


def _updated(stored: dict[str, Any], **labels: str | None) -> dict[str, Any]:
    new = json.loads(json.dumps(stored))
    for key, value in labels.items():
        if value is None:
            new["metadata"]["labels"].pop(key, None)
        else:
            new["metadata"]["labels"][key] = value
    return new


async def test_the_queue_of_a_submitted_job_cannot_change(hook: QueueWebhook, nats_url: str) -> None:
    stored, _ = await _admit(hook, _job("upd-1"), uid="q-upd-1")
    for labels in ({names.QUEUE_LABEL: "default"}, {names.QUEUE_LABEL: None}):
        new = _updated(stored, **labels)
        for path in ("/mutate", "/validate"):
            answer = await _post(hook, path, review(new, uid=f"q-upd-1{path}", operation="UPDATE", old=stored))
            assert answer["allowed"] is False and answer["status"]["code"] == 403, answer
            message = answer["status"]["message"]
            assert 'cannot change (kueue.x-k8s.io/queue-name: "training" -> "default"' in message
            assert "Delete the job and submit it again" in message
    [event] = await _submitted(nats_url, hook, "team-a", "upd-1")
    assert isinstance(event, ev.JobSubmitted)


async def test_a_new_priority_class_must_be_allowed_by_the_jobs_cluster_queue(hook: QueueWebhook, nats_url: str) -> None:
    stored, _ = await _admit(hook, _job("upd-2", queue=None, priority_class="low"), uid="q-upd-2")
    raised = _updated(stored, **{names.PRIORITY_CLASS_LABEL: "high"})
    answer = await _post(hook, "/validate", review(raised, uid="q-upd-2a", operation="UPDATE", old=stored))
    assert answer["allowed"] is False and answer["status"]["code"] == 403
    assert 'does not allow priority class "high"' in answer["status"]["message"]
    allowed = _updated(stored, **{names.PRIORITY_CLASS_LABEL: "normal"})
    answer = await _post(hook, "/validate", review(allowed, uid="q-upd-2b", operation="UPDATE", old=stored))
    assert answer["allowed"] is True
    updates = [e for e in await _submitted(nats_url, hook, "team-a", "upd-2") if isinstance(e, ev.JobUpdated)]
    assert [(u.priority_class, u.priority) for u in updates] == [("normal", 100)]


QUEUES_YAML = """\
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata:
  name: cq-a
spec:
  namespaceSelector:
    matchLabels:
      team: a
  resourceGroups:
  - coveredResources: ["cpu"]
    flavors:
    - name: default-flavor
      resources:
      - name: cpu
        nominalQuota: 10
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata:
  name: default-flavor
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata:
  name: training
  namespace: team-a
spec:
  clusterQueue: cq-a
---
apiVersion: v1
kind: Namespace
metadata:
  name: team-a
  labels:
    team: a
"""


async def test_python_m_webhook_with_queues_resolves_and_denies(nats_url: str, tmp_path: Path) -> None:
    path = tmp_path / "queues.yaml"
    path.write_text(QUEUES_YAML)
    root = f"whqm{uuid.uuid4().hex[:6]}"
    process = start_webhook(nats_url=nats_url, root=root, data_dir=tmp_path, extra=["--queues", str(path)])
    try:
        hook = QueueWebhook(port=process.port, ca=process.ca, root=root)
        await _admit(hook, _job("main-1"), uid="q-main-1")
        [event] = await _submitted(nats_url, hook, "team-a", "main-1")
        assert isinstance(event, ev.JobSubmitted) and event.cluster_queue == "cq-a"
        answer = await _post(hook, "/mutate", review(_job("main-2", queue="trainnig"), uid="q-main-2"))
        assert answer["allowed"] is False and 'did you mean "training"?' in answer["status"]["message"]
    finally:
        assert process.stop() == 0, process.log.read_text()


# ---- the decision alone (webhook/admit.py), for the cases the HTTPS tests do not reach ------------


def _decide(decide: Any, obj: dict[str, Any] | None, settings: admit.Settings, **kw: Any) -> admit.Outcome:
    _, request = decode_review(review(obj, uid="u", **kw))
    outcome: admit.Outcome = decide(request, settings)
    return outcome


def test_without_a_queue_config_a_queue_change_is_let_through_as_before() -> None:
    stored = _held(_job("plain"), uid="obj-plain")
    moved = _updated(stored, **{names.QUEUE_LABEL: "elsewhere"})
    for decide in (admit.mutate, admit.validate):
        assert _decide(decide, moved, admit.Settings(), operation="UPDATE", old=stored).allowed


def test_a_class_change_of_a_job_whose_queue_is_gone_is_only_checked_to_exist() -> None:
    stored = _held(_job("orphan", priority_class="low"), uid="obj-orphan")
    gone = admit.Settings(queues=ev.QueuesConfigured(priority_classes=QUEUES.priority_classes))
    raised = _updated(stored, **{names.PRIORITY_CLASS_LABEL: "high"})
    assert _decide(admit.validate, raised, gone, operation="UPDATE", old=stored).allowed
    unknown = _updated(stored, **{names.PRIORITY_CLASS_LABEL: "urgent"})
    outcome = _decide(admit.validate, unknown, gone, operation="UPDATE", old=stored)
    assert not outcome.allowed and outcome.reason == "priority-class-not-found"


def test_a_class_read_from_the_pods_is_named_by_its_path() -> None:
    obj = _job("pods")
    obj["spec"]["template"]["spec"]["priorityClassName"] = "system-node-critical"
    outcome = _decide(admit.mutate, obj, admit.Settings(queues=QUEUES))
    assert not outcome.allowed and outcome.response.status is not None
    assert '"system-node-critical" ($.spec.template.spec.priorityClassName) is not a WorkloadPriorityClass' in outcome.response.status.message
