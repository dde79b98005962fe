"""The NATS overlay as it would run: three nats-servers started from the shipped nats.conf (only
addresses and paths moved to loopback and a temp dir), probed on the StatefulSet's probe paths,
and the image version. ``kdispatch serve`` and the webhook on that cluster: test_manager_path.py."""

from __future__ import annotations

import subprocess

import yaml

from eventlog.embedded import find_binary
from tests.deploy.conftest import DEPLOY, one, rendered
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


def test_helm_values_say_what_the_statefulset_says() -> None:
    """deploy/nats/helm-values.yaml (for the official chart) mirrors nats.conf and the StatefulSet."""
    values = yaml.safe_load((DEPLOY / "nats" / "helm-values.yaml").read_text())
    sts, conf = statefulset(), nats_conf()
    assert values["fullnameOverride"] == sts["metadata"]["name"]
    assert values["config"]["cluster"] == {
        "enabled": True,
        "replicas": sts["spec"]["replicas"],
        "name": "kdispatch",
    }
    assert "name: kdispatch" in conf
    store = values["config"]["jetstream"]["fileStore"]
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert store["pvc"]["size"] == claim["spec"]["resources"]["requests"]["storage"]
    assert store["dir"] == container_mounts()["data"]
    assert f"max_file_store: {store['maxSize'].removesuffix('i')}" in conf
    assert (
        f"max_memory_store: {values['config']['jetstream']['memoryStore']['maxSize'].replace('Mi', 'MB')}"
        in conf
    )
    merged = values["config"]["merge"]
    assert merged["max_payload"] == "<< 4MB >>" and "max_payload: 4MB" in conf
    assert f"lame_duck_duration: {merged['lame_duck_duration']}" in conf
    image = values["container"]["image"]
    assert f"{image['repository']}:{image['tag']}" == container()["image"]
    assert values["container"]["merge"]["resources"] == container()["resources"]
    assert values["container"]["merge"]["securityContext"] == container()["securityContext"]
    pod = sts["spec"]["template"]["spec"]
    assert values["podTemplate"]["merge"]["spec"]["securityContext"] == pod["securityContext"]
    assert values["container"]["env"] == {e["name"]: e["value"] for e in container()["env"] if "value" in e}
