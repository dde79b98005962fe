"""NATS in deploy/ admits only kdispatch's components, each as its own user over mutual TLS: the
config's ``nats.nkey`` and ``nats.tls`` files are, in each Deployment, that component's own
Secrets; the servers know every user's public key and require client certificates."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

import pytest
import yaml

from eventlog.natsauth import COMPONENTS, authorization_conf
from tests.deploy.conftest import OVERLAYS, find, one, rendered

DEPLOYMENTS = {"kdispatch-reconciler": "reconciler", "kdispatch-webhook": "webhook"}


def _config(overlay: str) -> dict[str, Any]:
    (configmap,) = [o for o in find(rendered(overlay), "ConfigMap") if o["metadata"]["name"].startswith("kdispatch-config-")]
    config: dict[str, Any] = yaml.safe_load(configmap["data"]["config.yaml"])
    return config


def _nats_files(overlay: str) -> dict[str, str]:
    (configmap,) = [o for o in find(rendered(overlay), "ConfigMap") if o["metadata"]["name"].startswith("nats-config-")]
    files: dict[str, str] = configmap["data"]
    return files


def _secret_at(overlay: str, deployment: str, path: str) -> tuple[str, str]:
    """(Secret name, key) that the Deployment's container sees at file ``path``."""
    spec = one(rendered(overlay), "Deployment", deployment)["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    file = PurePosixPath(path)
    for mount in container["volumeMounts"]:
        if PurePosixPath(mount["mountPath"]) == file.parent:
            secret = volumes[mount["name"]].get("secret")
            assert secret is not None, f"{deployment}: {path} is not from a Secret"
            items = {i["path"]: i["key"] for i in secret.get("items", [])}
            return secret["secretName"], items.get(file.name, file.name)
    raise AssertionError(f"{deployment}: nothing mounted at {file.parent} for {path}")


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("deployment", sorted(DEPLOYMENTS))
def test_each_component_reads_its_own_user_and_certificate(overlay: str, deployment: str) -> None:
    component = DEPLOYMENTS[deployment]
    nats = _config(overlay)["nats"]
    assert nats["url"].startswith("tls://")
    assert _secret_at(overlay, deployment, nats["nkey"]) == (f"kdispatch-nats-{component}", "nkey.seed")
    for field, key in (("ca", "ca.crt"), ("cert", "tls.crt"), ("key", "tls.key")):
        assert _secret_at(overlay, deployment, nats["tls"][field]) == (f"kdispatch-{component}-nats-tls", key)
    spec = one(rendered(overlay), "Deployment", deployment)["spec"]["template"]["spec"]
    for volume in spec["volumes"]:
        if volume["name"] in ("nats-user", "nats-tls"):
            assert volume["secret"]["defaultMode"] & 0o007 == 0, "others may not read a NATS secret"
    (container,) = spec["containers"]
    assert all(not a.startswith("--nats-nkey") and not a.startswith("--nats-creds") for a in container.get("args", []))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_servers_require_tls_and_know_every_user(overlay: str) -> None:
    files = _nats_files(overlay)
    conf = files["nats.conf"]
    assert "include ./auth.conf" in conf
    client_tls = re.search(r"^tls \{(.*?)^\}", conf, re.S | re.M)
    assert client_tls and "verify: true" in client_tls.group(1), "clients need a certificate"
    assert conf.count("verify: true") == 2, "routes over mutual TLS as well"
    expected = authorization_conf({c: f"$KD_NKEY_{c.upper()}" for c in COMPONENTS}, root="kd")
    assert files["auth.conf"].endswith(expected)
    (container,) = one(rendered(overlay), "StatefulSet", "nats")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("valueFrom", {}).get("secretKeyRef") for e in container["env"]}
    for component in COMPONENTS:
        assert env[f"KD_NKEY_{component.upper()}"] == {"name": "kdispatch-nats-users", "key": component}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in one(rendered(overlay), "StatefulSet", "nats")["spec"]["template"]["spec"]["volumes"]}
    assert volumes[mounts["/etc/nats-tls"]]["secret"]["secretName"] == "nats-server-tls"
    for path in re.findall(r"(?:cert|key|ca)_file: (\S+)", conf):
        assert path.startswith("/etc/nats-tls/")


def test_cert_manager_issues_every_nats_certificate_from_the_ca() -> None:
    objects = rendered("overlays/cert-manager")
    certificates = {c["spec"]["secretName"]: c["spec"] for c in find(objects, "Certificate")}
    wanted = ["nats-server-tls", *(f"kdispatch-{c}-nats-tls" for c in DEPLOYMENTS.values()), "kdispatch-nats-reader-tls"]
    for secret in wanted:
        assert certificates[secret]["issuerRef"]["name"] == "kdispatch-ca", secret
    server = certificates["nats-server-tls"]
    assert {"server auth", "client auth"} <= set(server["usages"])
    assert {"nats", "*.nats-headless"} <= set(server["dnsNames"]), "the Service and every route name"
    for secret in wanted[1:]:
        assert "client auth" in certificates[secret]["usages"]
