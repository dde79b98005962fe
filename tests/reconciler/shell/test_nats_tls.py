"""``nats.tls`` (and creds) in the config file reach every command that opens the log: ``serve``
and the read-only ``log``, ``replay``, ``explain``, against a nats-server that requires TLS with a
client certificate."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from eventlog import events as ev
from eventlog.embedded import EmbeddedNats
from eventlog.jetstream import TlsFiles, connect
from tests.eventlog.pki import make_pki, server_tls_args

from .scenario import publish_clusters, submission, wait_for

ROOT = "tlsroot"


def _config(pki: Path, url: str) -> str:
    return f"""\
nats:
  url: {url}
  tls:
    ca: {pki / "ca.pem"}
    cert: {pki / "client.pem"}
    key: {pki / "client.key"}
policy:
  profiles:
    - name: default
      filters: [ClusterHealth, ClusterFeasibility]
      scores: [CapacityScore]
      strategy: {{type: TopK, k: 1}}
"""


def kd(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *argv], capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    (tmp_path / "pki").mkdir()
    return make_pki(tmp_path / "pki")


async def test_serve_and_the_log_commands_use_the_configs_tls_files(pki: Path, tmp_path: Path) -> None:
    async with EmbeddedNats(data_dir=tmp_path / "store", extra_args=server_tls_args(pki)) as server:
        url = f"tls://127.0.0.1:{server.port}"
        config = tmp_path / "kdispatch.yaml"
        config.write_text(_config(pki, url))
        tls = TlsFiles(ca=str(pki / "ca.pem"), cert=str(pki / "client.pem"), key=str(pki / "client.key"))
        jlog = await connect(url, tls=tls, root=ROOT)
        output = tmp_path / "serve.log"
        serve = subprocess.Popen(
            [sys.executable, "-m", "reconciler", "serve", "--config", str(config), "--root", ROOT, "--no-actuator", "--leader-id", "tls-leader"],
            stdout=output.open("wb"),
            stderr=subprocess.STDOUT,
        )
        try:
            await publish_clusters(jlog)
            await jlog.inbox.publish(submission(0), msg_id="submit/0")
            try:
                await wait_for(jlog, lambda es: any(isinstance(e.event, ev.Nominated) for e in es), timeout_s=60)
            except AssertionError:
                raise AssertionError(f"serve did not sequence over TLS:\n{output.read_text()[-3000:]}") from None
        finally:
            if serve.poll() is None:
                serve.terminate()
                await asyncio.get_running_loop().run_in_executor(None, serve.wait)
            await jlog.close()

        loop = asyncio.get_running_loop()
        source = ["--config", str(config), "--root", ROOT]
        log, replay, explain = await asyncio.gather(
            loop.run_in_executor(None, kd, "log", *source),
            loop.run_in_executor(None, kd, "replay", "--verify", *source),
            loop.run_in_executor(None, kd, "explain", "team-a/job-0", *source),
        )
    assert log.returncode == 0, log.stderr
    assert "PolicyLoaded" in log.stdout and "Nominated" in log.stdout
    assert replay.returncode == 0, replay.stderr
    assert "all identical" in replay.stdout
    assert explain.returncode == 0, explain.stderr
    assert "east" in explain.stdout
