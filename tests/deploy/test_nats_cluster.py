"""The NATS overlay as it would run: three nats-servers started from the shipped nats.conf (only
addresses and paths moved to loopback and a temp dir), probed on the StatefulSet's probe paths,
then ``kdispatch serve`` with the reconciler Deployment's arguments and the shipped config:
it must create its streams at 3 replicas, become leader and record the configured policy."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from eventlog import events as ev
from eventlog.embedded import find_binary, free_port
from eventlog.jetstream import connect
from tests.deploy.conftest import find, one, rendered

OVERLAY = "overlays/cert-manager"


def statefulset() -> dict[str, Any]:
    return one(rendered(OVERLAY), "StatefulSet", "nats")


def nats_conf() -> str:
    (configmap,) = [o for o in find(rendered(OVERLAY), "ConfigMap") if o["metadata"]["name"].startswith("nats-config-")]
    text: str = configmap["data"]["nats.conf"]
    return text


def _container() -> dict[str, Any]:
    (container,) = statefulset()["spec"]["template"]["spec"]["containers"]
    return container


def _ports() -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in _container()["ports"]}


def _mounts() -> dict[str, str]:
    return {m["name"]: m["mountPath"] for m in _container()["volumeMounts"]}


def test_conf_matches_the_statefulset() -> None:
    sts, conf, ports, mounts = statefulset(), nats_conf(), _ports(), _mounts()
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
    assert _container()["lifecycle"]["preStop"]["exec"]["command"][-1] == f"ldm={mounts['pid']}/nats.pid"
    assert "server_name: $SERVER_NAME" in conf
    assert any(e["name"] == "SERVER_NAME" and e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name" for e in _container()["env"])
    assert _container()["command"][-1] == f"{mounts['config']}/nats.conf"


def test_image_is_the_server_version_the_tests_run() -> None:
    out = subprocess.run([str(find_binary()), "--version"], capture_output=True, text=True, check=True).stdout
    version = out.strip().rsplit("v", 1)[-1]
    assert _container()["image"] == f"nats:{version}-alpine"


def _local_conf(conf: str, *, node: int, client: int, monitor: int, clusters: list[int], root: Path) -> str:
    """The shipped conf with addresses and paths moved: loopback ports, temp dirs."""
    ports, mounts = _ports(), _mounts()
    service = statefulset()["spec"]["serviceName"]
    swaps = {
        f"listen: 0.0.0.0:{ports['client']}": f"listen: 127.0.0.1:{client}",
        f"http_port: {ports['monitor']}": f"http: 127.0.0.1:{monitor}",
        f"store_dir: {mounts['data']}": f"store_dir: {root / 'data'}",
        f"pid_file: {mounts['pid']}/nats.pid": f"pid_file: {root / 'nats.pid'}",
        f"listen: 0.0.0.0:{ports['cluster']}": f"listen: 127.0.0.1:{clusters[node]}",
    }
    for i, port in enumerate(clusters):
        swaps[f"nats://nats-{i}.{service}:{ports['cluster']}"] = f"nats://127.0.0.1:{port}"
    for old, new in swaps.items():
        assert old in conf, old
        conf = conf.replace(old, new)
    return conf


def _wait_http(url: str, *, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except Exception as err:  # not up yet
            last = err
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer 200 within {timeout_s}s: {last}")


@pytest.fixture
def nats_cluster(tmp_path: Path) -> Iterator[list[str]]:
    """Three nats-servers from the shipped conf; yields their client URLs."""
    replicas = statefulset()["spec"]["replicas"]
    clients = [free_port() for _ in range(replicas)]
    monitors = [free_port() for _ in range(replicas)]
    clusters = [free_port() for _ in range(replicas)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for node in range(replicas):
            root = tmp_path / f"nats-{node}"
            root.mkdir()
            conf = root / "nats.conf"
            conf.write_text(
                _local_conf(nats_conf(), node=node, client=clients[node], monitor=monitors[node], clusters=clusters, root=root)
            )
            env = {**os.environ, "SERVER_NAME": f"nats-{node}"}
            log = (root / "server.log").open("wb")
            procs.append(subprocess.Popen([str(find_binary()), "--config", str(conf)], env=env, stdout=log, stderr=log))
        probes = {name: _container()[name]["httpGet"]["path"] for name in ("startupProbe", "readinessProbe", "livenessProbe")}
        for node, proc in enumerate(procs):
            for path in probes.values():
                _wait_http(f"http://127.0.0.1:{monitors[node]}{path}", timeout_s=60, proc=proc)
        yield [f"nats://127.0.0.1:{port}" for port in clients]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=30)


def _serve_argv(*, config: Path, nats_url: str, metrics_port: int, root: str) -> list[str]:
    """The reconciler container's command and args, with paths and ports for this machine."""
    deployment = one(rendered(OVERLAY), "Deployment", "kdispatch-reconciler")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    argv = [str(Path(sys.executable).parent / container["command"][0])]
    for arg in container["args"]:
        if arg.startswith("--config="):
            arg = f"--config={config}"
        elif arg.startswith("--metrics-port="):
            arg = f"--metrics-port={metrics_port}"
        argv.append(arg.replace("$(POD_NAME)", "kdispatch-reconciler-0"))
    # Test-only: this NATS, an isolated log, and no worker clusters to talk to.
    return [*argv, f"--nats={nats_url}", f"--root={root}", "--no-actuator"]


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
                        return entry.event, log_info.config.num_replicas or 0, inbox_info.config.num_replicas or 0
            await asyncio.sleep(0.3)
        raise AssertionError(f"no PolicyLoaded in the log within {timeout_s}s")
    finally:
        await jlog.close()


def test_serve_runs_on_the_shipped_nats_cluster_with_the_shipped_config(nats_cluster: list[str], tmp_path: Path) -> None:
    (configmap,) = [o for o in find(rendered(OVERLAY), "ConfigMap") if o["metadata"]["name"].startswith("kdispatch-config-")]
    config = tmp_path / "config.yaml"
    config.write_text(configmap["data"]["config.yaml"])
    metrics_port = free_port()
    root = "deploytest"
    argv = _serve_argv(config=config, nats_url=nats_cluster[0], metrics_port=metrics_port, root=root)
    log = (tmp_path / "serve.log").open("wb")
    serve = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        # The Deployment's probe path, on the Deployment's metrics port argument.
        _wait_http(f"http://127.0.0.1:{metrics_port}/healthz", timeout_s=60, proc=serve)
        policy, log_replicas, inbox_replicas = asyncio.run(_wait_policy(nats_cluster[1], root, timeout_s=60))
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
