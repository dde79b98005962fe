"""The NATS overlay as it would run: three nats-servers started from the shipped nats.conf (only
addresses and paths moved to loopback and a temp dir), probed on the StatefulSet's probe paths,
and the image version. ``kdispatch serve`` and the webhook on that cluster: test_manager_path.py."""

from __future__ import annotations

import subprocess

from eventlog.embedded import find_binary
from tests.deploy.conftest import one, rendered
from tests.deploy.natscluster import (
    OVERLAY,
    container,
    container_mounts,
    container_ports,
    nats_conf,
    statefulset,
)


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
