"""The NATS overlay as it would run: three nats-servers started from the shipped nats.conf (only
addresses and paths moved to loopback and a temp dir), probed on the StatefulSet's probe paths,
then ``kdispatch serve`` with the reconciler Deployment's arguments and the shipped config:
it must create its streams at 3 replicas, become leader and record the configured policy."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from pathlib import Path

import yaml

from eventlog import events as ev
from eventlog.embedded import find_binary, free_port
from eventlog.jetstream import connect
from tests.deploy.conftest import find, one, rendered
from tests.deploy.natscluster import (
    OVERLAY,
    container,
    container_mounts,
    container_ports,
    nats_conf,
    statefulset,
    wait_http,
)
from tests.deploy.processes import serve_argv


def test_conf_matches_the_statefulset() -> None:
    sts, conf, ports, mounts = statefulset(), nats_conf(), container_ports(), container_mounts()
    service = sts["spec"]["serviceName"]
    headless = one(rendered(OVERLAY), "Service", service)
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    routes = [f"nats://nats-{i}.{service}:{ports['cluster']}" for i in range(sts["spec"]["replicas"])]
    for route in routes:
        assert route in conf
    assert conf.count("nats://") == len(routes), "a route per replica, no more"
    assert f"listen: 0.0.0.0:{ports['client']}" in conf
    assert f"http_port: {ports['monitor']}" in conf
    assert f"store_dir: {mounts['data']}" in conf
    assert f"pid_file: {mounts['pid']}/nats.pid" in conf
    assert container()["lifecycle"]["preStop"]["exec"]["command"][-1] == f"ldm={mounts['pid']}/nats.pid"
    assert "server_name: $SERVER_NAME" in conf
    assert any(
        e["name"] == "SERVER_NAME" and e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        for e in container()["env"]
    )
    assert container()["command"][-1] == f"{mounts['config']}/nats.conf"


def test_image_is_the_server_version_the_tests_run() -> None:
    out = subprocess.run([str(find_binary()), "--version"], capture_output=True, text=True, check=True).stdout
    version = out.strip().rsplit("v", 1)[-1]
    assert container()["image"] == f"nats:{version}-alpine"


async def _wait_policy(url: str, root: str, *, timeout_s: float) -> tuple[ev.PolicyLoaded, int, int]:
    jlog = await connect(url, replicas=3, root=root)
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            async for batch in jlog.reader.read(from_seq=1):
                for entry in batch:
                    if isinstance(entry.event, ev.PolicyLoaded):
                        log_info = await jlog.js.stream_info(jlog.names.log_stream)
                        inbox_info = await jlog.js.stream_info(jlog.names.inbox_stream)
                        assert log_info.cluster is not None
                        return (
                            entry.event,
                            log_info.config.num_replicas or 0,
                            inbox_info.config.num_replicas or 0,
                        )
            await asyncio.sleep(0.3)
        raise AssertionError(f"no PolicyLoaded in the log within {timeout_s}s")
    finally:
        await jlog.close()


def test_serve_runs_on_the_shipped_nats_cluster_with_the_shipped_config(
    shipped_nats: list[str], tmp_path: Path
) -> None:
    (configmap,) = [
        o
        for o in find(rendered(OVERLAY), "ConfigMap")
        if o["metadata"]["name"].startswith("kdispatch-config-")
    ]
    config = tmp_path / "config.yaml"
    config.write_text(configmap["data"]["config.yaml"])
    metrics_port = free_port()
    root = "deploytest"
    argv = serve_argv(config=config, nats_url=shipped_nats[0], metrics_port=metrics_port, root=root)
    log = (tmp_path / "serve.log").open("wb")
    serve = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        # The Deployment's probe path, on the Deployment's metrics port argument.
        try:
            wait_http(f"http://127.0.0.1:{metrics_port}/healthz", timeout_s=60, proc=serve)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{(tmp_path / 'serve.log').read_text()[-3000:]}") from None
        policy, log_replicas, inbox_replicas = asyncio.run(_wait_policy(shipped_nats[1], root, timeout_s=60))
        raw = yaml.safe_load(config.read_text())
        assert (log_replicas, inbox_replicas) == (3, 3)
        assert [p.name for p in policy.profiles] == [p["name"] for p in raw["policy"]["profiles"]]
        assert policy.priority_classes == raw["policy"]["priorityClasses"]
        assert policy.worker_lost_timeout_ms == 60_000
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(timeout=30) == 0, (tmp_path / "serve.log").read_text()[-2000:]
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait(timeout=10)
        log.close()
