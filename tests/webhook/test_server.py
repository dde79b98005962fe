"""The webhook over real HTTPS (``python -m webhook``) with a real nats-server behind it."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import nats
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventlog import codec
from eventlog import events as ev
from eventlog.embedded import EmbeddedNats, free_port
from eventlog.jetstream import LogNames
from eventlog.kube import kinds, names
from tests.paths import REVIEWS
from tests.stalling import stall
from tests.waiting import eventually, eventually_blocking
from tests.webhook.conftest import Webhook, review, start_webhook
from webhook import jsonpatch

# The apiserver's default timeoutSeconds: a review must be answered before it gives up.
APISERVER_TIMEOUT = aiohttp.ClientTimeout(total=10)


def _job(name: str, **annotations: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "team-a", "labels": {names.QUEUE_LABEL: "user-queue"}, "annotations": annotations},
        "spec": {
            "parallelism": 3,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "x", "resources": {"limits": {"cpu": "2", "nvidia.com/gpu": "1"}}}]}},
        },
    }


async def _post(hook: Webhook, path: str, *, body: bytes) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession(timeout=APISERVER_TIMEOUT) as session,
        session.post(hook.url + path, data=body, ssl=hook.ssl_context()) as response,
    ):
        return response.status, json.loads(await response.read())


async def _admit(hook: Webhook, obj: dict[str, Any], *, uid: str, object_uid: str, dry_run: bool = False) -> dict[str, Any]:
    """What the API server does: /mutate, apply the patch, fill name and uid, /validate."""
    status, answer = await _post(hook, "/mutate", body=review(obj, uid=f"m-{uid}", dry_run=dry_run))
    assert status == 200 and answer["response"]["allowed"], answer
    patched = jsonpatch.apply(obj, json.loads(base64.b64decode(answer["response"]["patch"])))
    patched["metadata"]["uid"] = object_uid
    status, answer = await _post(hook, "/validate", body=review(patched, uid=uid, dry_run=dry_run))
    assert status == 200, answer
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == uid and answer["response"]["allowed"], answer
    return patched


async def _inbox(nats_url: str, root: str, *, subject: str) -> list[tuple[ev.Event, str]]:
    """(event, Nats-Msg-Id) of every inbox message on ``subject``."""
    nc = await nats.connect(nats_url)
    try:
        js = nc.jetstream()
        stream = LogNames(root).inbox_stream
        info = await js.stream_info(stream, subjects_filter=subject)
        out = []
        if info.state.subjects:
            seq = 0
            while True:
                try:
                    msg = await js.get_msg(stream, seq=seq + 1, subject=subject, next=True)
                except nats.js.errors.NotFoundError:
                    break
                assert msg.seq is not None and msg.data is not None
                seq = msg.seq
                out.append((codec.decode_event(msg.data), (msg.headers or {}).get("Nats-Msg-Id", "")))
        return out
    finally:
        await nc.close()


def _metric(text: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        m = re.match(r"^(\w+)\{(.*)\} (\S+)$", line)
        if m and m.group(1) == name and ",".join(sorted(m.group(2).split(","))) == wanted:
            return float(m.group(3))
    return 0.0


async def test_a_submission_is_recorded_exactly_once(webhook: Webhook, nats_url: str) -> None:
    name = f"train-{uuid.uuid4().hex[:6]}"
    obj = _job(name, **{"kdispatch.io/cluster-names": "east", "kdispatch.io/simulated-runtime": "30s"})
    await _admit(webhook, obj, uid="rev-a1", object_uid="obj-a1")
    await _admit(webhook, obj, uid="rev-a1", object_uid="obj-a1")  # the apiserver retrying the same review
    records = await _inbox(nats_url, webhook.root, subject=f"{webhook.root}.in.job.submitted.team-a.{name}")
    assert len(records) == 1
    event, msg_id = records[0]
    assert msg_id == "sub/obj-a1"
    assert isinstance(event, ev.JobSubmitted)
    assert event.job == ev.JobRef(namespace="team-a", name=name, uid="obj-a1", api_version="batch/v1", kind="Job")
    assert event.pod_sets == [ev.PodSet(name="main", count=3, requests={"cpu": 2000, "nvidia.com/gpu": 1})]
    assert event.placement.cluster_names == ["east"] and event.runtime_ms == 30_000 and event.queue == "user-queue"
    assert event.manifest is not None and event.manifest["spec"]["suspend"] is True
    assert event.manifest["spec"]["managedBy"] == names.MANAGED_BY


async def test_dry_run_records_nothing(webhook: Webhook, nats_url: str) -> None:
    name = f"dry-{uuid.uuid4().hex[:6]}"
    await _admit(webhook, _job(name), uid="rev-d1", object_uid="obj-d1", dry_run=True)
    assert await _inbox(nats_url, webhook.root, subject=f"{webhook.root}.in.job.*.team-a.{name}") == []


async def test_update_and_delete_are_recorded(webhook: Webhook, nats_url: str) -> None:
    name = f"upd-{uuid.uuid4().hex[:6]}"
    stored = await _admit(webhook, _job(name), uid="rev-u0", object_uid="obj-u")
    grown = json.loads(json.dumps(stored))
    grown["spec"]["parallelism"] = 6
    status, answer = await _post(webhook, "/validate", body=review(grown, uid="rev-u1", operation="UPDATE", old=stored))
    assert status == 200 and answer["response"]["allowed"]
    status, answer = await _post(webhook, "/validate", body=review(None, uid="rev-u2", operation="DELETE", old=grown))
    assert status == 200 and answer["response"]["allowed"]
    [(updated, uid1)] = await _inbox(nats_url, webhook.root, subject=f"{webhook.root}.in.job.updated.team-a.{name}")
    [(deleted, uid2)] = await _inbox(nats_url, webhook.root, subject=f"{webhook.root}.in.job.deleted.team-a.{name}")
    assert isinstance(updated, ev.JobUpdated) and updated.pod_sets[0].count == 6 and uid1 == "rev-u1"
    assert isinstance(deleted, ev.JobDeleted) and deleted.job.uid == "obj-u" and uid2 == "rev-u2"


async def test_denials_explain_and_are_counted(webhook: Webhook) -> None:
    obj = _job("bad", **{"kdispatch.io/cluster-affinity": '{"required": [{"matchExpressions": [{"key": "zone", "operator": "in", "values": ["a"]}]}]}'})
    status, answer = await _post(webhook, "/mutate", body=review(obj, uid="rev-x"))
    assert status == 200
    response = answer["response"]
    assert response["uid"] == "rev-x" and response["allowed"] is False
    assert response["status"]["code"] == 400
    assert '$.required[0].matchExpressions[0].operator: found "in"' in response["status"]["message"]
    assert 'did you mean "In"?' in response["status"]["message"]
    status, text = webhook.request("GET", "/metrics")
    assert status == 200
    assert _metric(text.decode(), "kdispatch_webhook_denials_total", endpoint="mutate", reason="invalid-placement") >= 1


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        (b"", 400, "empty body"),
        (b"null", 400, "expected a JSON object"),
        (b"{\"kind\": \"AdmissionReview\", \"apiVersion\": \"admission.k8s.io/v1\"}", 400, "no request"),
        ((REVIEWS / "connaisseur-21_broken_admission_request.json").read_bytes(), 400, "kind"),
        (b"{" * 5000, 400, "not JSON"),
        (b" " * (2 << 20), 413, ""),
    ],
    ids=["empty", "null", "no-request", "broken-sample", "deep", "oversized"],
)
def test_malformed_bodies_get_4xx_with_a_reason(webhook: Webhook, body: bytes, status: int, fragment: str) -> None:
    got, text = webhook.request("POST", "/validate", body=body)
    assert got == status
    assert fragment in text.decode(errors="replace")


def test_a_body_that_never_arrives_gets_408(webhook: Webhook) -> None:
    with socket.create_connection(("127.0.0.1", webhook.port)) as raw, webhook.ssl_context().wrap_socket(raw, server_hostname="localhost") as tls:
        tls.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        tls.settimeout(30)
        head = tls.recv(4096).decode()
    assert head.startswith("HTTP/1.1 408"), head
    assert "did not arrive" in head


def test_health_readiness_and_metrics(webhook: Webhook) -> None:
    assert webhook.request("GET", "/healthz") == (200, b"ok\n")
    assert webhook.request("GET", "/readyz") == (200, b"ok\n")
    webhook.request("POST", "/mutate", body=review(_job("m1"), uid="rev-m1"))
    status, text = webhook.request("GET", "/metrics")
    body = text.decode()
    assert status == 200
    assert _metric(body, "kdispatch_webhook_requests_total", endpoint="mutate", result="allowed") >= 1
    assert "kdispatch_webhook_request_seconds_bucket" in body


def _check_answer(status: int, body: bytes) -> None:
    assert status in (200, 400), (status, body[:300])
    answer = json.loads(body)
    if status == 200:
        assert answer["kind"] == "AdmissionReview" and isinstance(answer["response"]["allowed"], bool)
        if not answer["response"]["allowed"]:
            assert answer["response"]["status"]["code"] in (400, 403)
    else:
        assert answer["error"]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
_kind = st.sampled_from(kinds.SUPPORTED_KINDS)


@st.composite
def _reviews(draw: st.DrawFn) -> bytes:
    """Reviews of supported kinds whose objects are random, opted in, in any operation."""
    info = draw(_kind)
    obj = {
        "apiVersion": info.api_version,
        "kind": info.kind,
        "metadata": {
            "name": "r",
            "labels": {names.QUEUE_LABEL: "q"},
            "annotations": draw(st.dictionaries(st.sampled_from(["kdispatch.io/placement", "kdispatch.io/nominate", "x"]), st.text(max_size=12), max_size=2)),
        },
        "spec": draw(_json),
    }
    request = {
        "uid": "h",
        "kind": {"group": info.group, "version": info.version, "kind": info.kind},
        "operation": draw(st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"])),
        "object": obj,
        "oldObject": draw(st.none() | st.just(obj)),
        "dryRun": True,
    }
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=300) | _json.map(lambda v: json.dumps(v).encode()) | _reviews())
def test_nothing_a_client_sends_gives_a_500(webhook: Webhook, body: bytes) -> None:
    for path in ("/mutate", "/validate"):
        _check_answer(*webhook.request("POST", path, body=body))


async def test_the_config_file_gives_nats_data_dir_and_priority_values(nats_url: str, tmp_path: Path) -> None:
    config = tmp_path / "kdispatch.yaml"
    config.write_text(
        f"nats:\n  url: {nats_url}\ndataDir: {tmp_path}\npolicy:\n  priorityClasses:\n    high: 7\n    low: 1\n"
    )
    root = f"whcfg{uuid.uuid4().hex[:6]}"
    hook = start_webhook(nats_url=None, root=root, data_dir=tmp_path, extra=["--config", str(config)])
    try:
        obj = _job("prio")
        obj["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "high"
        await _admit(hook, obj, uid="rev-c1", object_uid="obj-c1")
        [(event, _)] = await _inbox(nats_url, root, subject=f"{root}.in.job.submitted.team-a.prio")
        assert isinstance(event, ev.JobSubmitted)
        assert (event.priority_class, event.priority) == ("high", 7)
    finally:
        assert hook.stop() == 0


async def test_without_nats_url_the_embedded_server_is_started_and_stopped(tmp_path: Path) -> None:
    hook = start_webhook(nats_url=None, root="whemb", data_dir=tmp_path)  # ready: NATS answers
    try:
        stored = await _admit(hook, _job("embedded"), uid="rev-e1", object_uid="obj-e1")
        assert stored["spec"]["suspend"] is True
        text = hook.request("GET", "/metrics")[1].decode()
        assert _metric(text, "kdispatch_webhook_published_total", type="JobSubmitted") == 1
    finally:
        assert hook.stop() == 0
    log = hook.log.read_text()
    assert '"embedded": true' in log and "nats_server_stopped" in log


async def test_nats_unreachable_the_review_is_still_answered(tmp_path: Path) -> None:
    dead = f"nats://127.0.0.1:{free_port()}"
    hook = start_webhook(nats_url=dead, root="whdead", data_dir=tmp_path, wait_ready=False)
    try:
        assert hook.request("GET", "/readyz")[0] == 503
        obj = _job("lonely")
        await _admit(hook, obj, uid="rev-n1", object_uid="obj-n1")  # allowed: the job stays held
        text = hook.request("GET", "/metrics")[1].decode()
        assert _metric(text, "kdispatch_webhook_publish_failures_total", reason="unavailable") == 1
    finally:
        assert hook.stop() == 0


async def test_nats_stalled_the_review_is_answered_at_the_bound_and_shutdown_finishes_it(tmp_path: Path) -> None:
    server = EmbeddedNats(data_dir=tmp_path / "nats")
    await server.start_async()
    hook = start_webhook(nats_url=server.url, root="whstall", data_dir=tmp_path, extra=["--publish-timeout", "2"])
    try:
        stored = await _admit(hook, _job("first"), uid="rev-s0", object_uid="obj-s0")  # NATS is fine
        assert server.pid is not None
        await stall(server)  # connected, but no acks
        try:
            status, answer = await _post(hook, "/validate", body=review({**stored, "metadata": {**stored["metadata"], "name": "second"}}, uid="rev-s1"))
            assert status == 200 and answer["response"] == {"uid": "rev-s1", "allowed": True}
            text = hook.request("GET", "/metrics")[1].decode()
            assert _metric(text, "kdispatch_webhook_publish_failures_total", reason="timeout") == 1
            assert hook.request("GET", "/readyz")[0] == 503

            # SIGTERM while a review waits on the stalled publish: it is still answered.
            async with aiohttp.ClientSession(timeout=APISERVER_TIMEOUT) as session:
                body = review({**stored, "metadata": {**stored["metadata"], "name": "third"}}, uid="rev-s2")
                pending = session.post(hook.url + "/validate", data=body, ssl=hook.ssl_context())
                task = asyncio.ensure_future(pending)


                async def waiting_on_the_publish() -> bool:
                    assert not task.done(), "the review was answered while its publish stalled"
                    metrics = (await asyncio.to_thread(hook.request, "GET", "/metrics"))[1].decode()
                    return "kdispatch_webhook_in_flight 1.0" in metrics

                await eventually(waiting_on_the_publish, what="the review to wait on the stalled publish")
                hook.proc.send_signal(signal.SIGTERM)
                response = await task
                assert response.status == 200
                assert (await response.json())["response"]["uid"] == "rev-s2"
        finally:
            os.kill(server.pid, signal.SIGCONT)
        assert hook.proc.wait(timeout=15) == 0
        stopping = [line for line in hook.log.read_text().splitlines() if "webhook_stopping" in line]
        assert stopping and json.loads(stopping[0])["in_flight"] == 1  # SIGTERM came while it was answering
    finally:
        hook.stop()
        await server.stop_async()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in state


def test_exit_with_parent_leaves_no_orphan(tmp_path: Path, nats_url: str) -> None:
    port = free_port()
    child = [sys.executable, "-m", "webhook", "--host", "127.0.0.1", "--port", str(port), "--nats", nats_url]
    child += ["--root", "whorphan", "--data-dir", str(tmp_path), "--exit-with-parent"]
    script = f"import subprocess, sys, time; p = subprocess.Popen({child!r}); print(p.pid, flush=True); time.sleep(600)"
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=Path(__file__).parents[2])
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        hook = Webhook(port=port, ca=tmp_path / "webhook-tls" / "ca.crt", root="whorphan", proc=parent, log=tmp_path / "none")
        eventually_blocking(
            lambda: hook.ca.exists() and hook.request("GET", "/healthz")[0] == 200,
            timeout_s=60,
            ignoring=(OSError, ssl.SSLError),
            what="the child webhook /healthz",
        )
        assert _alive(pid)
    finally:
        parent.kill()  # SIGKILL: the parent cannot pass anything on
        parent.wait()
    eventually_blocking(lambda: not _alive(pid), timeout_s=30, what=f"the orphaned webhook {pid} to exit")


SAMPLES = sorted(p for p in REVIEWS.glob("*.json") if not p.name.startswith("k8sdocs-response"))
BROKEN = {"connaisseur-21_broken_admission_request.json", "connaisseur-25_null_request.json"}


@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_real_review_samples_over_https(webhook: Webhook, path: Path) -> None:
    raw = json.loads(path.read_bytes())
    for endpoint in ("/mutate", "/validate"):
        status, body = webhook.request("POST", endpoint, body=path.read_bytes())
        if path.name in BROKEN:
            assert status == 400 and json.loads(body)["error"].startswith("not an AdmissionReview")
            continue
        answer = json.loads(body)
        assert status == 200 and answer["kind"] == "AdmissionReview"
        assert answer["apiVersion"] == raw.get("apiVersion", "admission.k8s.io/v1")
        assert answer["response"]["uid"] == raw.get("request", raw).get("uid", "")
