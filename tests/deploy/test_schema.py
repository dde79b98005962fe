"""Every manifest in deploy/, and every rendered overlay, validates against the Kubernetes schema.

kubernetes-validate ships the OpenAPI schemas of each Kubernetes release inside the wheel (no
network). Strict mode rejects unknown fields, which is what catches a misspelt field that the API
server would silently drop. We check the oldest Kubernetes we support and the newest the package
knows.

Oldest supported: 1.32. batch/v1 Job ``spec.managedBy`` is enabled by default from 1.32 (beta);
before that the API server drops the field the webhook sets, and a dispatched Job would also run
on the manager. (The webhooks' matchConditions need 1.30 anyway.)
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import latest_version

from eventlog.kube.kueue import GROUP as KUEUE_GROUP
from eventlog.kube.kueue import load_queues
from tests.deploy import certmanager, k8sschema, promoperator, workercluster
from tests.deploy.conftest import DEPLOY, manifest_files, one, rendered

OLDEST = "1.32"
NEWEST = latest_version()
VERSIONS = (OLDEST, NEWEST)


def validate(obj: dict[str, Any], version: str) -> None:
    if obj["apiVersion"].startswith("cert-manager.io/"):
        certmanager.validate(obj)
    elif obj["apiVersion"].startswith("monitoring.coreos.com/"):
        promoperator.validate(obj)
    elif obj["apiVersion"].startswith("kdispatch.io/"):
        workercluster.validate(obj)
    else:
        k8sschema.validate(obj, version)


def test_versions_are_distinct_and_known() -> None:
    assert tuple(int(p) for p in OLDEST.split(".")) < tuple(int(p) for p in NEWEST.split("."))


@pytest.mark.parametrize("version", VERSIONS)
def test_rendered_objects_validate(kustomization: str, version: str) -> None:
    for obj in rendered(kustomization):
        validate(obj, version)


@pytest.mark.parametrize("path", manifest_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
@pytest.mark.parametrize("version", VERSIONS)
def test_manifest_files_validate(path: Path, version: str) -> None:
    kueue = False
    for obj in yaml.safe_load_all(path.read_text()):
        if obj and obj["apiVersion"].startswith(KUEUE_GROUP + "/"):
            kueue = True  # Kueue's CRDs are not in kubernetes-validate: checked whole, below
        elif obj:
            validate(obj, version)
    if kueue:  # as strictly as `serve --queues` reads them (unknown fields, references, quantities)
        load_queues(path)


def test_every_yaml_file_is_accounted_for() -> None:
    """A YAML file in deploy/ is a kustomization, our config, the Helm values (and their generated
    users), or objects validated above."""
    others = {
        p.relative_to(DEPLOY).as_posix()
        for p in DEPLOY.rglob("*.yaml")
        if p.name != "kustomization.yaml" and p not in manifest_files()
    }
    assert others == {"base/config.yaml", "nats/helm-values.yaml", "nats/helm-values-users.yaml"}


def test_validation_works_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """The schemas ship inside the wheel: no connection is opened (CI machines may be offline)."""
    import socket

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("kubernetes-validate tried to open a network connection")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    for version in VERSIONS:
        for obj in rendered("worker"):
            validate(obj, version)


def test_cached_validation_is_the_packages_own() -> None:
    """k8sschema caches validators; on real objects it must decide exactly as the package does."""
    deployment = one(rendered("overlays/cert-manager"), "Deployment", "kdispatch-webhook")
    broken = copy.deepcopy(deployment)
    broken["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "https"
    for version in VERSIONS:
        for obj in rendered("overlays/cert-manager"):
            if not obj["apiVersion"].startswith("cert-manager.io/"):
                assert k8sschema.validate(obj, version) == kubernetes_validate.validate(
                    obj, version, strict=True
                )
        with pytest.raises(kubernetes_validate.ValidationError) as ours:
            k8sschema.validate(broken, version)
        with pytest.raises(kubernetes_validate.ValidationError) as theirs:
            kubernetes_validate.validate(broken, version, strict=True)
        assert (ours.value.message, list(ours.value.path)) == (theirs.value.message, list(theirs.value.path))


def test_strict_validation_catches_a_misspelt_field() -> None:
    """The check can fail: a field the API server would drop without a word is an error here."""
    deployment = copy.deepcopy(one(rendered("overlays/cert-manager"), "Deployment", "kdispatch-webhook"))
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"]["readOnlyRootFileSystem"] = container["securityContext"].pop(
        "readOnlyRootFilesystem"
    )
    with pytest.raises(kubernetes_validate.ValidationError, match="readOnlyRootFileSystem"):
        validate(deployment, NEWEST)


def test_structural_check_catches_a_bad_certificate() -> None:
    certificate = copy.deepcopy(one(rendered("overlays/cert-manager"), "Certificate", "kdispatch-webhook"))
    certificate["spec"]["privateKey"]["size"] = 2048  # not an ECDSA curve size
    with pytest.raises(jsonschema.ValidationError):
        validate(certificate, NEWEST)
    certificate = copy.deepcopy(one(rendered("overlays/cert-manager"), "Certificate", "kdispatch-webhook"))
    certificate["spec"]["dnsName"] = certificate["spec"].pop("dnsNames")
    with pytest.raises(jsonschema.ValidationError):
        validate(certificate, NEWEST)


def test_the_worker_cluster_schema_is_strict() -> None:
    """The check above can fail: a misspelt field or drain policy is caught."""
    (obj,) = [o for o in yaml.safe_load_all((DEPLOY / "examples" / "worker-cluster.yaml").read_text()) if o]
    workercluster.validate(obj)
    for spec in ({"lables": {}}, {"drainPolicy": "Evict"}, {"kubeConfig": {"locationType": "File", "location": "x"}}):
        bad = copy.deepcopy(obj)
        bad["spec"].update(spec)
        with pytest.raises(jsonschema.ValidationError):
            workercluster.validate(bad)
