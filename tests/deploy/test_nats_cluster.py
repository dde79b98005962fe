"""The NATS overlay as it would run: three nats-servers started from the shipped nats.conf (only
addresses and paths moved to loopback and a temp dir), probed on the StatefulSet's probe paths,
and the image version. ``kdispatch serve`` and the webhook on that cluster: test_manager_path.py."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from eventlog.embedded import find_binary
from eventlog.natsauth import COMPONENTS, permissions
from tests.deploy import natscluster
from tests.deploy.conftest import DEPLOY, one, rendered
from tests.deploy.natscluster import (
    OVERLAY,
    container,
    container_mounts,
    container_ports,
    nats_conf,
    shipped_nats_cluster,
    statefulset,
    wait_http,
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
    assert {k: v for k, v in values["config"]["cluster"].items() if k != "tls"} == {
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
    # The chart sets POD_NAME itself (server_name); everything else in the environment is ours.
    assert values["container"]["env"] == {
        e["name"]: e.get("value") or {"valueFrom": e["valueFrom"]} for e in container()["env"] if e["name"] != "SERVER_NAME"
    }


def test_helm_values_have_the_tls_of_nats_conf() -> None:
    """Clients and routes over mutual TLS, from the Secret the StatefulSet mounts, with the CA
    the chart mounts beside the pair (its mount: /etc/nats-certs/<protocol>)."""
    values = yaml.safe_load((DEPLOY / "nats" / "helm-values.yaml").read_text())
    (secret,) = [v["secret"]["secretName"] for v in statefulset()["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls"]
    conf = nats_conf()
    assert conf.count("verify: true") == 2 and conf.count("timeout: 2") == 2  # the client and the route blocks
    for protocol, tls in (("nats", values["config"]["nats"]["tls"]), ("cluster", values["config"]["cluster"]["tls"])):
        assert tls["enabled"] is True and tls["secretName"] == secret
        assert tls["merge"] == {"ca_file": f"/etc/nats-certs/{protocol}/ca.crt", "verify": True, "timeout": 2}


def test_helm_users_are_the_users_of_auth_conf() -> None:
    """helm-values-users.yaml: each component's permissions as eventlog/natsauth.py has them
    (deploy/generate.py writes it: test_generate.py), its key from the variable auth.conf names,
    which the chart's container gets from Secret kdispatch-nats-users as the StatefulSet does."""
    users = yaml.safe_load((DEPLOY / "nats" / "helm-values-users.yaml").read_text())
    env = yaml.safe_load((DEPLOY / "nats" / "helm-values.yaml").read_text())["container"]["env"]
    auth = (DEPLOY / "nats" / "auth.conf").read_text()
    listed = users["config"]["merge"]["authorization"]["users"]
    assert len(listed) == len(COMPONENTS)
    for component, user in zip(COMPONENTS, listed, strict=True):
        variable = f"KD_NKEY_{component.upper()}"
        assert user["nkey"] == f"<< ${variable} >>" and f"nkey: ${variable}" in auth
        assert env[variable]["valueFrom"]["secretKeyRef"] == {"name": "kdispatch-nats-users", "key": component}
        assert user["permissions"] == permissions(component, root="kd")


def test_a_port_taken_before_its_server_binds_it_is_picked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ports are picked free and bound a moment later; a parallel test's process can take one in
    between (a CI run saw a server exit before /healthz answered). The cluster starts again."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        picked: list[list[int]] = []
        real = natscluster.free_ports

        def first_client_port_taken(n: int) -> list[int]:
            ports = real(n)
            if not picked:
                ports[0] = taken.getsockname()[1]
            picked.append(ports)
            return ports

        monkeypatch.setattr(natscluster, "free_ports", first_client_port_taken)
        with shipped_nats_cluster(tmp_path) as cluster:
            assert len(picked) == 2
            assert "address already in use" in (tmp_path / "start-1" / "nats-0" / "server.log").read_text()
            for monitor in cluster.monitors:
                wait_http(f"{monitor}/healthz", timeout_s=30)
