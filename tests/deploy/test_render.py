"""The overlays render, every reference inside them resolves, and our renderer agrees with kustomize."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy import kustomize
from tests.deploy.conftest import DEPLOY, KUSTOMIZATIONS, OVERLAYS, find, rendered

# Secrets an administrator creates by hand (docs/deploy.md says when and how).
# The NATS users' seeds (python -m eventlog.natsauth secrets) are made by hand everywhere; without
# cert-manager, so are the TLS Secrets (docs/security.md).
NATS_USERS = {"kdispatch-nats-reconciler", "kdispatch-nats-webhook"}
CREATED_BY_HAND = {
    "overlays/self-signed": {
        "kdispatch-webhook-tls",
        "nats-server-tls",
        "kdispatch-reconciler-nats-tls",
        "kdispatch-webhook-nats-tls",
        *NATS_USERS,
    },
    "overlays/cert-manager": NATS_USERS,
}


def test_every_kustomization_is_found() -> None:
    assert {"base", "nats", "worker", *OVERLAYS} <= set(KUSTOMIZATIONS)


def test_renders_without_duplicates(kustomization: str) -> None:
    objects = rendered(kustomization)
    assert objects, f"{kustomization} renders nothing"
    keys = [kustomize.identity(o) for o in objects]
    assert len(keys) == len(set(keys))


def _volume_refs(objects: list[dict[str, Any]]) -> set[tuple[str, str]]:
    refs = set()
    for obj in objects:
        template = obj.get("spec", {}).get("template", {}).get("spec", {})
        for volume in template.get("volumes", []):
            if "configMap" in volume:
                refs.add(("ConfigMap", volume["configMap"]["name"]))
            if "secret" in volume:
                refs.add(("Secret", volume["secret"]["secretName"]))
        if obj["kind"] in ("Deployment", "StatefulSet"):
            refs.add(("ServiceAccount", template.get("serviceAccountName", "default")))
    return refs


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_references_resolve(overlay: str) -> None:
    objects = rendered(overlay)
    present = {(o["kind"], o["metadata"]["name"]) for o in objects}
    # cert-manager writes the Secret a Certificate names; "default" exists in every namespace.
    present |= {("Secret", c["spec"]["secretName"]) for c in find(objects, "Certificate")}
    present.add(("ServiceAccount", "default"))
    missing = {ref for ref in _volume_refs(objects) if ref not in present}
    assert missing == {("Secret", name) for name in CREATED_BY_HAND[overlay]}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_generated_config_rolls_the_deployments(overlay: str) -> None:
    """The config ConfigMap's name carries a content hash, so a config change restarts the pods."""
    objects = rendered(overlay)
    (config,) = [
        o for o in find(objects, "ConfigMap") if o["metadata"]["name"].startswith("kdispatch-config-")
    ]
    for name in ("kdispatch-webhook", "kdispatch-reconciler"):
        (deployment,) = find(objects, "Deployment", name)
        volumes = deployment["spec"]["template"]["spec"]["volumes"]
        assert {"name": "config", "configMap": {"name": config["metadata"]["name"]}} in volumes


def test_hash_changes_with_content() -> None:
    a = {"kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"config.yaml": "a: 1\n"}}
    b = {"kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"config.yaml": "a: 2\n"}}
    assert kustomize.content_hash(a) != kustomize.content_hash(b)
    assert re.fullmatch(r"[a-z0-9]{10}", kustomize.content_hash(a))


def test_renderer_refuses_what_it_does_not_implement(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: []\ncommonLabels: {a: b}\n")
    with pytest.raises(kustomize.Unsupported, match="commonLabels"):
        kustomize.render(tmp_path)


def test_json6902_and_strategic_merge() -> None:
    obj: dict[str, Any] = {
        "metadata": {"name": "x", "annotations": {"a": "1"}},
        "webhooks": [{"name": "w", "x": 1}, {"name": "v"}],
    }
    kustomize.json6902(
        obj, [{"op": "add", "path": "/webhooks/0/clientConfig", "value": {"caBundle": "Q0E="}}]
    )
    assert obj["webhooks"][0]["clientConfig"] == {"caBundle": "Q0E="}
    merged = kustomize.strategic_merge(
        obj, {"metadata": {"annotations": {"b": "2"}}, "webhooks": [{"name": "v", "y": 2}]}
    )
    assert merged["metadata"]["annotations"] == {"a": "1", "b": "2"}
    assert merged["webhooks"][1] == {"name": "v", "y": 2}
    assert merged["webhooks"][0]["x"] == 1


def _normalized(objects: list[dict[str, Any]]) -> dict[tuple[str, str, str, str], Any]:
    """Generated names without their hash suffix (kustomize's hash input is internal to it)."""
    names = {}
    for obj in objects:
        match = re.fullmatch(r"(.+)-[a-z0-9]{10}", obj["metadata"]["name"])
        if obj["kind"] in ("ConfigMap", "Secret") and match:
            names[obj["metadata"]["name"]] = match.group(1)
    text = json.dumps(objects)
    for full, base in names.items():
        text = text.replace(full, base)
    return {kustomize.identity(o): o for o in json.loads(text)}


def test_renderer_agrees_with_kubectl_kustomize(kustomization: str) -> None:
    assert shutil.which("kubectl"), "kubectl is needed for this cross-check (it is on every machine of ours and CI's)"
    out = subprocess.run(
        ["kubectl", "kustomize", str(DEPLOY / kustomization)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    theirs = _normalized([o for o in yaml.safe_load_all(out) if o])
    ours = _normalized(rendered(kustomization))
    assert sorted(ours) == sorted(theirs)
    for key, obj in ours.items():
        assert obj == theirs[key], key
