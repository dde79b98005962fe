"""The WebhookConfigurations select exactly the kinds and objects the webhook handles."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventlog.kube.kinds import SUPPORTED_KINDS
from eventlog.kube.names import QUEUE_LABEL
from tests.deploy import kustomize
from tests.deploy.admission import entry_calls_webhook, rule_resources
from tests.deploy.conftest import OVERLAYS, REPO, find, one, rendered
from webhook import admit
from webhook.review import decode_review

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
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    kind: str = "Job",
    owners: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": "train",
        "namespace": "team-a",
        "uid": "0b5e6c1a-0000-4000-8000-000000000001",
    }
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    if owners is not None:
        meta["ownerReferences"] = owners
    if kind == "Pod":
        spec: dict[str, Any] = {
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}]
        }
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {"template": template}}


def _called(kind: str, operation: str, obj: dict[str, Any], namespace_labels: dict[str, str]) -> bool:
    return any(
        entry_calls_webhook(entry, operation=operation, obj=obj, namespace_labels=namespace_labels)
        for entry in entries("overlays/cert-manager", kind)
        if operation in {op for rule in entry["rules"] for op in rule["operations"]}
    )


def _webhook_acts(obj: dict[str, Any]) -> bool:
    """What the webhook itself does with this object's CREATE: anything but "ignored"."""
    group, _, version = obj["apiVersion"].rpartition("/")
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "r-1",
            "kind": {"group": group, "version": version, "kind": obj["kind"]},
            "operation": "CREATE",
            "namespace": "team-a",
            "name": "train",
            "userInfo": {"username": "alice"},
            "object": obj,
        },
    }
    _, request = decode_review(json.dumps(body).encode())
    return admit.mutate(request, admit.Settings()).reason != "ignored"


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
OWNER = st.builds(
    lambda kind, controller: {
        "apiVersion": kind[0],
        "kind": kind[1],
        "name": "parent",
        "uid": "u",
        "controller": controller,
    },
    st.sampled_from(
        [
            ("jobset.x-k8s.io/v1alpha2", "JobSet"),
            ("batch/v1", "Job"),
            ("batch/v1", "CronJob"),
            ("apps/v1", "ReplicaSet"),
        ]
    ),
    st.sampled_from([True, False]),
)
OWNERS = st.none() | st.lists(OWNER, max_size=2)


@settings(max_examples=150, deadline=None)
@given(
    labels=MAPS,
    annotations=MAPS,
    owners=OWNERS,
    kind=st.sampled_from(["Job", "Pod"]),
    operation=st.sampled_from(["CREATE", "UPDATE", "DELETE"]),
)
def test_the_api_server_calls_the_webhook_exactly_for_objects_it_acts_on(
    labels: dict[str, str] | None,
    annotations: dict[str, str] | None,
    owners: list[dict[str, Any]] | None,
    kind: str,
    operation: str,
) -> None:
    """Selectors + CEL matchConditions == the webhook's own decision (opt-in, and not a child of
    a controller), so with failurePolicy Fail an outage blocks nothing the webhook would ignore."""
    obj = _job(labels=labels, annotations=annotations, kind=kind, owners=owners)
    want = _webhook_acts(obj)
    for config in CONFIG_KINDS:
        if config == "MutatingWebhookConfiguration" and operation == "DELETE":
            assert not _called(config, operation, obj, ENABLED_NS)
            continue
        assert _called(config, operation, obj, ENABLED_NS) == want, (config, operation, obj["metadata"])
        # Namespaces opt in too: nothing is intercepted where kdispatch is not enabled.
        assert not _called(config, operation, obj, {"kubernetes.io/metadata.name": "team-a"})


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
    # A JobSet's Jobs and a ReplicaSet's Pods inherit the queue label, and are left alone.
    child = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "name": "js",
        "uid": "u",
        "controller": True,
    }
    assert not _called(
        "MutatingWebhookConfiguration", "CREATE", _job(labels={QUEUE_LABEL: "q"}, owners=[child]), ENABLED_NS
    )
    rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": True}
    pod = _job(labels={QUEUE_LABEL: "q"}, kind="Pod", owners=[rs])
    assert not _called("MutatingWebhookConfiguration", "CREATE", pod, ENABLED_NS)
    # A CronJob's Jobs are submissions of their own.
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly", "uid": "u", "controller": True}
    assert _called(
        "MutatingWebhookConfiguration", "CREATE", _job(labels={QUEUE_LABEL: "q"}, owners=[cron]), ENABLED_NS
    )


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
