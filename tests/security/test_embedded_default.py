"""``kdispatch serve``'s embedded default runs NATS with authorization, each process as its own
user; the webhook works with nothing but its user's rights."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from eventlog import events as ev
from eventlog.embedded import EmbeddedNats, free_port
from eventlog.jetstream import connect
from eventlog.natsauth import Credentials, inbox_prefix, public_key
from tests.waiting import Unmet, eventually
from tests.webhook.conftest import start_webhook
from tests.webhook.test_server import _admit, _job

CONFIG = """\
policy:
  profiles:
    - name: default
      filters: [ClusterHealth, ClusterFeasibility]
      scores: [CapacityScore]
      strategy: {type: TopK, k: 1}
"""


def _monitor_port(log: Path) -> int | None:
    found = re.search(r"Starting http monitor on [\d.]+:(\d+)", log.read_text()) if log.exists() else None
    return int(found.group(1)) if found else None


def _connections(port: int) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/connz?auth=true", timeout=5) as resp:
        conns: list[dict[str, Any]] = json.loads(resp.read())["connections"] or []
        return conns


async def test_serve_runs_nats_with_one_user_per_process(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    config = tmp_path / "kdispatch.yaml"
    config.write_text(CONFIG)
    argv = [sys.executable, "-m", "reconciler", "serve", "--config", str(config), "--data-dir", str(data_dir)]
    argv += ["--webhook", "--webhook-port", str(free_port()), "--no-actuator", "--leader-id", "solo"]
    output = tmp_path / "serve.log"
    proc = subprocess.Popen(argv, stdout=output.open("wb"), stderr=subprocess.STDOUT)
    creds = Credentials(data_dir)
    try:

        async def both_connected() -> Any:
            assert proc.poll() is None, f"serve exited with {proc.returncode}:\n{output.read_text()[-3000:]}"
            port = _monitor_port(data_dir / "nats-server.log")
            if port is None:
                return Unmet("no monitor port in the server's log yet")
            users = {c.get("name"): c.get("authorized_user") for c in _connections(port)}
            return users if "kdispatch-webhook" in users and any(
                str(n).startswith("kdispatch-serve-") for n in users
            ) else Unmet(users)

        users = await eventually(both_connected, timeout_s=60, interval_s=0.2, what="serve and its webhook on NATS")
        seeds = {c: public_key(creds.seed_file(c).read_text()) for c in ("reconciler", "webhook")}
        assert users["kdispatch-webhook"] == seeds["webhook"]
        assert users["kdispatch-serve-solo"] == seeds["reconciler"]
        url = (data_dir / "nats.url").read_text().strip()
        with pytest.raises(ConnectionError):  # no identity, no entry, even on loopback
            await connect(url, connect_timeout_s=2.0)
        def kd(verb: str) -> subprocess.CompletedProcess[str]:
            argv = [sys.executable, "-m", "reconciler", verb, "--data-dir", str(data_dir)]
            return subprocess.run(argv, capture_output=True, text=True, timeout=60)

        log, status = await asyncio.gather(asyncio.to_thread(kd, "log"), asyncio.to_thread(kd, "status"))
        assert log.returncode == 0 and "PolicyLoaded" in log.stdout, log.stderr  # as the reader
        assert status.returncode == 0 and "log seq" in status.stdout, status.stderr
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def test_the_webhook_admits_with_only_its_own_rights(tmp_path: Path) -> None:
    creds = Credentials(tmp_path).ensure(root="kd")
    async with EmbeddedNats(data_dir=tmp_path / "nats", config_file=creds.server_conf) as server:
        reconciler = await connect(
            server.url, nkey=creds.seed_file("reconciler"), inbox_prefix=inbox_prefix("reconciler")
        )
        hook = await asyncio.to_thread(
            start_webhook,
            nats_url=server.url,
            root="kd",
            data_dir=tmp_path,
            extra=["--nats-nkey", str(creds.seed_file("webhook"))],
        )
        try:
            await _admit(hook, _job("secured"), uid="r1", object_uid="uid-secured")
            items = await reconciler.sequencer("leader").pull(max_items=5, timeout_s=5.0)
            assert [(type(i.event).__name__, i.subject) for i in items] == [
                ("JobSubmitted", "kd.in.webhook.job.submitted.team-a.secured")
            ]
            assert isinstance(items[0].event, ev.JobSubmitted)
        finally:
            assert await asyncio.to_thread(hook.stop) == 0, hook.log.read_text()
            await reconciler.close()
