"""``kdispatch serve --webhook`` end to end: admission review -> log -> decision -> simulated worker
-> placed -> finished, with the webhook child supervised (killed, restarted) and SIGTERM at the end."""

from __future__ import annotations

import asyncio
import base64
import copy
import functools
import json
import signal
import ssl
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eventlog import events as ev
from eventlog.embedded import free_port
from eventlog.jetstream import JetStreamLog
from tests.waiting import eventually

from .scenario import decisions_of, submission, wait_for

CONFIG = """\
policy:
  profiles:
    - name: default
      filters: [ClusterHealth, ClusterSelector, ClusterFeasibility, ClusterHeadroom]
      scores: [CapacityScore]
      strategy: {type: TopK, k: 1}
clusters:
  - name: east
    labels: {region: east}
    heartbeatInterval: 500ms
    simulated: {capacity: {cpu: "64", nvidia.com/gpu: "8"}, admissionLatency: 20ms, defaultRuntime: 300ms}
  - name: west
    labels: {region: west}
    heartbeatInterval: 500ms
    simulated: {capacity: {cpu: "64", nvidia.com/gpu: "4"}, admissionLatency: 20ms, defaultRuntime: 300ms}
"""

JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {
        "name": "via-webhook",
        "namespace": "team-a",
        "uid": "4b1d7c52-0000-4000-8000-000000000001",
        "labels": {"kueue.x-k8s.io/queue-name": "user-queue"},
        "annotations": {"kdispatch.io/cluster-selector": "region=west"},
    },
    "spec": {
        "parallelism": 1,
        "completions": 1,
        "suspend": False,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}},
                    }
                ],
            }
        },
    },
}


def _review(obj: dict[str, Any]) -> bytes:
    request = {
        "uid": "e2e-1",
        "kind": {"group": "batch", "version": "v1", "kind": "Job"},
        "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
        "operation": "CREATE",
        "namespace": "team-a",
        "name": "via-webhook",
        "userInfo": {"username": "alice"},
        "object": obj,
        "dryRun": False,
    }
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


def _apply_patch(obj: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """The API server's part: apply the mutating webhook's JSONPatch (add/replace) to the object."""
    out = copy.deepcopy(obj)
    for op in patch:
        assert op["op"] in ("add", "replace"), op
        *parents, last = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        node = out
        for token in parents:
            node = node.setdefault(token, {})
        node[last] = op["value"]
    return out


def _https(port: int, path: str, *, ca: Path, body: bytes | None = None) -> tuple[int, bytes]:
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.check_hostname = False
    req = urllib.request.Request(f"https://127.0.0.1:{port}{path}", data=body, method="POST" if body else "GET")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:
        return resp.status, resp.read()


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        out += [int(c) for c in text]
    return out


async def _until(check: Callable[[], object], *, timeout_s: float, what: str) -> object:
    """``check`` (blocking: HTTPS requests) in a thread until truthy; not listening yet is not yet."""
    return await eventually(
        lambda: asyncio.to_thread(check),
        timeout_s=timeout_s,
        interval_s=0.1,
        ignoring=(OSError, ssl.SSLError),
        what=what,
    )


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return str(resp.read().decode())


async def test_serve_with_webhook_and_simulated_clusters(
    jslog: JetStreamLog, nats_url: str, log_root: str, tmp_path: Path
) -> None:
    config = tmp_path / "kdispatch.yaml"
    config.write_text(CONFIG)
    data_dir = tmp_path / "data"
    port, metrics_port = free_port(), free_port()
    log_file = (tmp_path / "serve.log").open("wb")
    argv = [sys.executable, "-m", "reconciler", "serve", "--nats", nats_url, "--root", log_root]
    proc = subprocess.Popen(
        [
            *argv,
            *("--config", str(config), "--data-dir", str(data_dir), "--metrics-port", str(metrics_port)),
            *("--webhook", "--webhook-port", str(port)),
        ],
        stdout=log_file,
        stderr=subprocess.STDOUT,
    )
    ca = data_dir / "webhook-tls" / "ca.crt"
    try:
        await _until(lambda: ca.exists() and _https(port, "/readyz", ca=ca)[0] == 200, timeout_s=60, what="webhook ready")
        # As the API server would: /mutate, apply the patch, then /validate (which records it).
        run = asyncio.get_running_loop().run_in_executor
        status, body = await run(None, functools.partial(_https, port, "/mutate", ca=ca, body=_review(JOB)))
        answer = json.loads(body)["response"]
        assert status == 200 and answer["allowed"] is True, answer
        mutated = _apply_patch(JOB, json.loads(base64.b64decode(answer["patch"])))
        assert mutated["spec"]["suspend"] is True
        status, body = await run(None, functools.partial(_https, port, "/validate", ca=ca, body=_review(mutated)))
        assert status == 200 and json.loads(body)["response"]["allowed"] is True, body
        for i in range(2, 6):
            await jslog.inbox.publish(submission(i), msg_id=f"submit/{i}")
        # Every job is created on a simulated worker, admitted, placed, run for 300 ms, finished.
        entries = await wait_for(jslog, lambda es: len(decisions_of(es, ev.Finished)) >= 5, timeout_s=60)
        placed = {e.event.job.name: e.event.cluster for e in decisions_of(entries, ev.Placed)}  # type: ignore[attr-defined]
        assert placed["via-webhook"] == "west"  # the annotation's selector, through the webhook
        assert {"job-2", "job-3", "job-4", "job-5"} <= set(placed)
        assert any(isinstance(e.event, ev.ClusterRegistered) and e.event.cluster == "east" for e in entries)
        assert any(isinstance(e.event, ev.RemoteAdmitted) for e in entries)
        # The actuator's work shows on the same /metrics as the leader's.
        text = await run(None, _scrape, metrics_port)
        created = [r for r in text.splitlines() if r.startswith("kdispatch_actuator_applied_total{") and 'intent="run"' in r]
        assert sum(float(r.rsplit(" ", 1)[1]) for r in created) >= 5, text

        # The webhook child dies: the supervisor starts another.
        (child,) = _children(proc.pid)
        subprocess.run(["kill", "-9", str(child)], check=True)
        await _until(
            lambda: [c for c in _children(proc.pid) if c != child] and _https(port, "/healthz", ca=ca)[0] == 200,
            timeout_s=60,
            what="webhook restarted",
        )
        (restarted,) = _children(proc.pid)
        assert restarted != child

        # SIGTERM: serve stops, and takes its webhook child with it.
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.get_running_loop().run_in_executor(None, proc.wait, 30)
        assert code == 0
        assert not Path(f"/proc/{restarted}").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log_file.close()
    verify = subprocess.run(
        [sys.executable, "-m", "reconciler", "replay", "--verify", "--nats", nats_url, "--root", log_root],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
