"""The WebhookConfigurations select exactly the kinds and objects the webhook handles."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.deploy import kustomize
from tests.deploy.admission import entry_calls_webhook, rule_resources
from tests.deploy.conftest import OVERLAYS, REPO, find, one, rendered
from webhook.admit import opted_in
from webhook.kinds import QUEUE_LABEL, SUPPORTED_KINDS

KINDS = {(k.group, k.version, k.plural) for k in SUPPORTED_KINDS}
CONFIG_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
ENABLED_NS = {"kubernetes.io/metadata.name": "team-a", "kdispatch.io/enabled": "true"}


def configs(overlay: str) -> list[dict[str, Any]]:
    return [one(rendered(overlay), kind, "kdispatch") for kind in CONFIG_KINDS]


def entries(overlay: str, kind: str) -> list[dict[str, Any]]:
    return list(one(rendered(overlay), kind, "kdispatch")["webhooks"])


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("kind", CONFIG_KINDS)
def test_every_entry_selects_exactly_the_supported_kinds(overlay: str, kind: str) -> None:
    for entry in entries(overlay, kind):
        operations = {op for rule in entry["rules"] for op in rule["operations"]}
        for operation in operations:
            assert rule_resources(entry, operation) == KINDS, f"{entry['name']} {operation}"
        for rule in entry["rules"]:
            assert rule["scope"] == "Namespaced"
            assert not any("*" in v or "/" in v for v in rule["resources"]), "no wildcards, no subresources"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_operations_and_failure_policies(overlay: str) -> None:
    """Fail for CREATE/UPDATE (managedBy can only be set at CREATE); Ignore for DELETE (the
    watcher records deletions anyway; an outage must not block deleting a job)."""
    covered: dict[tuple[str, str], set[str]] = {}
    for kind in CONFIG_KINDS:
        for entry in entries(overlay, kind):
            ops = {op for rule in entry["rules"] for op in rule["operations"]}
            expected_policy = "Ignore" if ops == {"DELETE"} else "Fail"
            assert "DELETE" not in ops or ops == {"DELETE"}, f"{entry['name']}: DELETE gets its own entry"
            assert entry["failurePolicy"] == expected_policy, entry["name"]
            opt_in = entry["name"].split(".")[0]
            covered.setdefault((kind, opt_in), set()).update(ops)
    assert covered == {
        ("MutatingWebhookConfiguration", "queued"): {"CREATE", "UPDATE"},
        ("MutatingWebhookConfiguration", "annotated"): {"CREATE", "UPDATE"},
        ("ValidatingWebhookConfiguration", "queued"): {"CREATE", "UPDATE", "DELETE"},
        ("ValidatingWebhookConfiguration", "annotated"): {"CREATE", "UPDATE", "DELETE"},
    }


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_entry_settings_and_service(overlay: str) -> None:
    objects = rendered(overlay)
    service = one(objects, "Service", "kdispatch-webhook")
    deployment = one(objects, "Deployment", "kdispatch-webhook")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    names = []
    for config in configs(overlay):
        path = "/mutate" if config["kind"] == "MutatingWebhookConfiguration" else "/validate"
        for entry in config["webhooks"]:
            names.append(entry["name"])
            assert entry["sideEffects"] == "NoneOnDryRun"
            assert entry["matchPolicy"] == "Equivalent"
            assert entry["admissionReviewVersions"] == ["v1"]
            assert 1 <= entry["timeoutSeconds"] <= 5, "small: a slow webhook stalls every submission"
            ref = entry["clientConfig"]["service"]
            assert (ref["name"], ref["namespace"]) == (
                service["metadata"]["name"],
                service["metadata"]["namespace"],
            )
            assert ref["path"] == path
            (svc_port,) = [p for p in service["spec"]["ports"] if p["port"] == ref["port"]]
            assert ports[svc_port["targetPort"]] == 9443
            assert f"--port={ports['https']}" in container["args"]
            # Never our own namespace (the webhook must not gate its own pods) nor kube-system.
            system = {"kubernetes.io/metadata.name": "kdispatch-system", "kdispatch.io/enabled": "true"}
            assert not entry_calls_webhook(
                entry, operation="CREATE", obj=_job(labels={QUEUE_LABEL: "q"}), namespace_labels=system
            )
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"[a-z]+\.[a-z]+\.kdispatch\.io", n) for n in names)


def _job(
    *, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "train", "namespace": "team-a"}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {}}


def _called(kind: str, operation: str, obj: dict[str, Any], namespace_labels: dict[str, str]) -> bool:
    return any(
        entry_calls_webhook(entry, operation=operation, obj=obj, namespace_labels=namespace_labels)
        for entry in entries("overlays/cert-manager", kind)
        if operation in {op for rule in entry["rules"] for op in rule["operations"]}
    )


KEYS = st.sampled_from(
    [
        QUEUE_LABEL,
        "kueue.x-k8s.io/queue",
        "kdispatch.io/cluster-selector",
        "kdispatch.io/placement",
        "kdispatch.io/profile",
        "kdispatch.io/anything",
        "kdispatch.io",
        "x.kdispatch.io/profile",
        "kueue.x-k8s.io/cluster-selector",
        "kueue.x-k8s.io/cluster-affinity",
        "kueue.x-k8s.io/cluster-tolerations",
        "kueue.x-k8s.io/dispatch-mode",
        "kueue.x-k8s.io/cluster-selectors",
        "kueue.x-k8s.io/priority-class",
        "app",
    ]
)
MAPS = st.none() | st.dictionaries(KEYS, st.sampled_from(["", "q", "{}"]), max_size=4)


@settings(max_examples=150, deadline=None)
@given(labels=MAPS, annotations=MAPS, operation=st.sampled_from(["CREATE", "UPDATE", "DELETE"]))
def test_the_api_server_calls_the_webhook_exactly_for_objects_that_opt_in(
    labels: dict[str, str] | None, annotations: dict[str, str] | None, operation: str
) -> None:
    """objectSelector + CEL matchConditions == the webhook's own opt-in rule (admit.opted_in)."""
    obj = _job(labels=labels, annotations=annotations)
    want = opted_in(obj)
    for kind in CONFIG_KINDS:
        if kind == "MutatingWebhookConfiguration" and operation == "DELETE":
            assert not _called(kind, operation, obj, ENABLED_NS)
            continue
        assert _called(kind, operation, obj, ENABLED_NS) == want, (kind, operation, obj["metadata"])
        # Namespaces opt in too: nothing is intercepted where kdispatch is not enabled.
        assert not _called(kind, operation, obj, {"kubernetes.io/metadata.name": "team-a"})


def test_opt_in_examples() -> None:
    assert _called("MutatingWebhookConfiguration", "CREATE", _job(labels={QUEUE_LABEL: "gpu"}), ENABLED_NS)
    assert _called(
        "MutatingWebhookConfiguration",
        "CREATE",
        _job(annotations={"kdispatch.io/profile": "topk"}),
        ENABLED_NS,
    )
    assert _called(
        "ValidatingWebhookConfiguration",
        "DELETE",
        _job(annotations={"kdispatch.io/placement": "{}"}),
        ENABLED_NS,
    )
    assert not _called("MutatingWebhookConfiguration", "CREATE", _job(labels={"app": "x"}), ENABLED_NS)


def test_cert_manager_injects_the_ca_of_the_serving_certificate() -> None:
    objects = rendered("overlays/cert-manager")
    deployment = one(objects, "Deployment", "kdispatch-webhook")
    service = one(objects, "Service", "kdispatch-webhook")
    mounted = {
        v["secret"]["secretName"] for v in deployment["spec"]["template"]["spec"]["volumes"] if "secret" in v
    }
    for config in configs("overlays/cert-manager"):
        source = config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        namespace, name = source.split("/")
        certificate = one(objects, "Certificate", name)
        assert certificate["metadata"]["namespace"] == namespace
        assert certificate["spec"]["secretName"] in mounted
        host = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
        assert host in certificate["spec"]["dnsNames"]
        assert "server auth" in certificate["spec"]["usages"]
        # The chain resolves: serving cert <- CA Issuer <- CA certificate <- self-signed Issuer.
        issuer = one(objects, "Issuer", certificate["spec"]["issuerRef"]["name"])
        ca = [
            c
            for c in find(objects, "Certificate")
            if c["spec"]["secretName"] == issuer["spec"]["ca"]["secretName"]
        ]
        assert len(ca) == 1 and ca[0]["spec"]["isCA"] is True
        assert "selfSigned" in one(objects, "Issuer", ca[0]["spec"]["issuerRef"]["name"])["spec"]
        assert all("caBundle" not in e["clientConfig"] for e in config["webhooks"])


def _documented_patches() -> dict[str, list[dict[str, Any]]]:
    """The caBundle JSON patches docs/deploy.md tells an administrator to apply, by config kind:
    a heredoc writes each patch file, then ``kubectl patch ... --patch-file`` applies it."""
    text = (REPO / "docs" / "deploy.md").read_text()
    files = dict(re.findall(r"cat > (\S+) <<EOF\n(.*?)\nEOF\n", text, re.S))
    applied = re.findall(
        r"kubectl patch (mutating|validating)webhookconfiguration kdispatch --type=json --patch-file=(\S+)",
        text,
    )
    assert {kind for kind, _ in applied} == {"mutating", "validating"}, (
        "docs/deploy.md lost the caBundle patch step"
    )
    return {f"{kind.capitalize()}WebhookConfiguration": json.loads(files[path]) for kind, path in applied}


def test_documented_ca_bundle_patch_covers_every_entry_of_the_self_signed_overlay() -> None:
    bundle = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
    for kind, patch in _documented_patches().items():
        config = json.loads(json.dumps(one(rendered("overlays/self-signed"), kind, "kdispatch")))
        assert "annotations" not in config["metadata"], "no cert-manager in this overlay"
        ops = json.loads(json.dumps(patch).replace("${CA_BUNDLE}", bundle))
        kustomize.json6902(config, ops)
        assert [e["clientConfig"].get("caBundle") for e in config["webhooks"]] == [bundle] * len(
            config["webhooks"]
        )
