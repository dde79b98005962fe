"""``kdispatch serve --metrics-port``: the same port serves ``/api/v1`` from the leader's state;
a standby says it is not the leader instead of showing a stale state."""

from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from eventlog.embedded import free_port
from eventlog.jetstream import JetStreamLog

from ..shell.scenario import publish_clusters, submission, wait_for
from ..shell.test_serve import CONFIG, serve


def _get(port: int, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


async def _until(port: int, path: str, ok: Any) -> Any:
    """GET (off the event loop) until ``ok(status, doc)``: a bound of 30 s, not a timing."""
    loop = asyncio.get_running_loop()
    end = loop.time() + 30
    last: Any = None
    while loop.time() < end:
        try:
            last = await loop.run_in_executor(None, _get, port, path)
        except OSError as err:  # not listening yet
            last = err
        else:
            if ok(*last):
                return last[1]
        await asyncio.sleep(0.1)
    raise AssertionError(f"{path} on :{port} never answered as expected; last: {last!r}")


@pytest.fixture
async def replicas(tmp_path: Path) -> AsyncIterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


async def test_the_leader_serves_the_api_and_a_standby_says_it_is_not_the_leader(
    jslog: JetStreamLog, nats_url: str, log_root: str, tmp_path: Path, replicas: list[subprocess.Popen[bytes]]
) -> None:
    config = tmp_path / "kdispatch.yaml"
    config.write_text(CONFIG)
    port_a, port_b = free_port(), free_port()
    replicas.append(serve(nats_url, log_root, "--metrics-port", str(port_a), "--lease-ttl", "30", config=config, leader="A"))
    await wait_for(jslog, lambda es: any(e.leader == "A" for e in es), timeout_s=30)
    replicas.append(serve(nats_url, log_root, "--metrics-port", str(port_b), "--lease-ttl", "30", config=config, leader="B"))
    await publish_clusters(jslog)
    await jslog.inbox.publish(submission(0, gpus=99), msg_id="s0")  # fits nowhere: it waits

    doc = await _until(port_a, "/api/v1/jobs/team-a/job-0", lambda code, doc: code == 200 and doc["job"]["phase"] == "Unschedulable")
    assert doc["job"]["position"] == 1 and doc["job"]["queue"] == "default"
    assert [t["type"] for t in doc["timeline"]] == ["JobSubmitted", "Unschedulable"]
    assert {c["cluster"] for c in doc["explanation"]["clusters"]} == {"east", "west"}
    _, clusters = _get(port_a, "/api/v1/clusters")
    assert [c["name"] for c in clusters["items"]] == ["east", "west"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port_a}/", timeout=5) as resp:  # the page, same port
        assert resp.headers["Content-Type"].startswith("text/html") and b'src="app.js"' in resp.read()

    standby = await _until(port_b, "/api/v1/queues", lambda code, doc: code == 503)
    assert "not the leader" in standby["error"]
