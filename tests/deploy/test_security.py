"""Every workload in every overlay runs locked down, sized, probed and disruption-budgeted."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy import kustomize
from tests.deploy.conftest import KUSTOMIZATIONS, OVERLAYS, find, rendered

WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob", "Pod")


def workloads(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in WORKLOADS]


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    (spec,) = kustomize._pod_specs(obj)
    return spec


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = pod_spec(obj)
    return list(spec.get("initContainers", [])) + list(spec["containers"])


ALL_WORKLOADS = [
    (k, f"{o['kind']}/{o['metadata']['name']}") for k in KUSTOMIZATIONS for o in workloads(rendered(k))
]


def _workload(kustomization: str, ref: str) -> dict[str, Any]:
    kind, name = ref.split("/")
    (obj,) = find(rendered(kustomization), kind, name)
    return obj


def test_there_are_workloads_to_check() -> None:
    names = {ref for _, ref in ALL_WORKLOADS}
    assert {"Deployment/kdispatch-webhook", "Deployment/kdispatch-reconciler", "StatefulSet/nats"} <= names


@pytest.mark.parametrize(("kustomization", "ref"), ALL_WORKLOADS)
def test_pod_security(kustomization: str, ref: str) -> None:
    obj = _workload(kustomization, ref)
    spec = pod_spec(obj)
    pod = spec.get("securityContext", {})
    assert pod.get("runAsNonRoot") is True
    assert pod.get("runAsUser", 0) > 0
    assert pod.get("seccompProfile") == {"type": "RuntimeDefault"}
    assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC")
    for volume in spec.get("volumes", []):
        assert "hostPath" not in volume, f"{ref}: hostPath volume {volume['name']}"
    for container in containers(obj):
        where = f"{ref} container {container['name']}"
        ctx = container.get("securityContext", {})
        assert ctx.get("runAsNonRoot", pod.get("runAsNonRoot")) is True, where
        assert ctx.get("readOnlyRootFilesystem") is True, where
        assert ctx.get("allowPrivilegeEscalation") is False, where
        assert ctx.get("privileged", False) is False, where
        assert ctx.get("capabilities", {}).get("drop") == ["ALL"], where
        assert not ctx.get("capabilities", {}).get("add"), where
        assert ctx.get("seccompProfile", pod.get("seccompProfile")) == {"type": "RuntimeDefault"}, where


@pytest.mark.parametrize(("kustomization", "ref"), ALL_WORKLOADS)
def test_resources_images_and_probes(kustomization: str, ref: str) -> None:
    obj = _workload(kustomization, ref)
    for container in pod_spec(obj)["containers"]:
        where = f"{ref} container {container['name']}"
        resources = container.get("resources", {})
        for section in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(resources.get(section, {})), f"{where}: {section}"
        _name, tag, digest = kustomize.split_image(container["image"])
        if kustomization in OVERLAYS or kustomization == "nats":
            assert (tag and tag != "latest") or digest, f"{where}: image {container['image']} is not pinned"
        assert "readinessProbe" in container and "livenessProbe" in container, where


def test_webhook_probes_are_the_health_endpoints() -> None:
    (webhook,) = find(rendered("overlays/cert-manager"), "Deployment", "kdispatch-webhook")
    (container,) = webhook["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_replicas_and_disruption_budgets(overlay: str) -> None:
    objects = rendered(overlay)
    expected = {
        ("Deployment", "kdispatch-webhook"): 2,
        ("Deployment", "kdispatch-reconciler"): 2,
        ("StatefulSet", "nats"): 3,
    }
    for (kind, name), replicas in expected.items():
        (obj,) = find(objects, kind, name)
        assert obj["spec"]["replicas"] == replicas
        labels = obj["spec"]["template"]["metadata"]["labels"]
        budgets = [
            p
            for p in find(objects, "PodDisruptionBudget")
            if all(labels.get(k) == v for k, v in p["spec"]["selector"]["matchLabels"].items())
        ]
        assert len(budgets) == 1, f"{kind}/{name} needs exactly one PodDisruptionBudget"
        spec = budgets[0]["spec"]
        # A drain may take one pod at a time, never all of them.
        assert spec.get("minAvailable", 0) >= 1 or spec.get("maxUnavailable") == 1


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policies_deny_by_default_and_allow_only_the_paths_used(overlay: str) -> None:
    objects = rendered(overlay)
    policies = {p["metadata"]["name"]: p["spec"] for p in find(objects, "NetworkPolicy")}
    assert policies["default-deny"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}

    def ingress_ports(name: str) -> set[int]:
        return {port["port"] for rule in policies[name].get("ingress", []) for port in rule.get("ports", [])}

    (webhook,) = find(objects, "Deployment", "kdispatch-webhook")
    webhook_port = webhook["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"]
    assert ingress_ports("kdispatch-webhook") == {webhook_port}
    assert ingress_ports("nats") == {4222, 6222}
    # NATS clients: only the webhook and the reconciler pods.
    (client_rule,) = [r for r in policies["nats"]["ingress"] if r["ports"][0]["port"] == 4222]
    (selector,) = client_rule["from"]
    assert selector["podSelector"]["matchExpressions"] == [
        {
            "key": "app.kubernetes.io/name",
            "operator": "In",
            "values": ["kdispatch-webhook", "kdispatch-reconciler"],
        }
    ]
    reconciler_egress = {p["port"] for r in policies["kdispatch-reconciler"]["egress"] for p in r["ports"]}
    assert reconciler_egress == {4222, 443, 6443}


WITH_RECONCILER = [k for k in KUSTOMIZATIONS if find(rendered(k), "Deployment", "kdispatch-reconciler")]


def test_the_reconciler_is_in_the_kustomizations_a_user_deploys() -> None:
    assert {"base", "overlays/cert-manager", "overlays/self-signed"} <= set(WITH_RECONCILER), WITH_RECONCILER


@pytest.mark.parametrize("kustomization", WITH_RECONCILER)
def test_reconciler_probes_are_the_health_endpoints(kustomization: str) -> None:
    """Readiness is /readyz (connected to NATS), liveness /healthz (the process answers), on the
    port that serves both, in every kustomization that has the reconciler."""
    found = find(rendered(kustomization), "Deployment", "kdispatch-reconciler")
    (container,) = [c for c in found[0]["spec"]["template"]["spec"]["containers"] if c["name"] == "reconciler"]
    ports = {p["name"] for p in container.get("ports", [])}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        assert container[probe]["httpGet"]["path"] == path, f"{kustomization}: {probe}"
        assert container[probe]["httpGet"]["port"] in ports, f"{kustomization}: {probe} port"


def _mib(quantity: str) -> float:
    units = {"Ki": 2**-10, "Mi": 1, "Gi": 2**10}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return float(quantity[: -len(suffix)]) * factor
    return float(quantity) / 2**20


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_webhook_memory_limit_covers_its_load_limits(overlay: str) -> None:
    """The webhook sheds load beyond its limits (docs/webhook.md, "Load limits"); what it may hold
    at those limits, as its args set them, must fit in the container's memory limit."""
    from webhook.__main__ import build_parser
    from webhook.limits import memory_ceiling_mib

    (webhook,) = find(rendered(overlay), "Deployment", "kdispatch-webhook")
    (container,) = [c for c in webhook["spec"]["template"]["spec"]["containers"] if c["name"] == "webhook"]
    args = build_parser().parse_args(container.get("args", []))
    ceiling = memory_ceiling_mib(max_connections=args.max_connections, max_bytes_in_flight=args.max_bytes_in_flight)
    limit = _mib(container["resources"]["limits"]["memory"])
    assert ceiling < 0.85 * limit, f"{overlay}: the webhook may hold ~{ceiling:.0f} MiB, its limit is {limit:.0f} MiB"
