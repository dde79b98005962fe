"""The NetworkPolicies of each overlay, evaluated: every path kdispatch uses is open, and the paths
it does not use are closed."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.conftest import OVERLAYS, find, rendered
from tests.deploy.netpol import Endpoint, connects

NS = "kdispatch-system"


def pod_of(objects: list[dict[str, Any]], kind: str, name: str, ip: str) -> Endpoint:
    (obj,) = find(objects, kind, name)
    template = obj["spec"]["template"]
    ports = {
        p["name"]: p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports", [])
    }
    return Endpoint(namespace=NS, labels=template["metadata"]["labels"], ip=ip, named_ports=ports)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_paths(overlay: str) -> None:
    objects = rendered(overlay)
    policies = find(objects, "NetworkPolicy")
    webhook = pod_of(objects, "Deployment", "kdispatch-webhook", "10.1.0.1")
    reconciler = pod_of(objects, "Deployment", "kdispatch-reconciler", "10.1.0.2")
    nats = pod_of(objects, "StatefulSet", "nats", "10.1.0.3")
    nats_peer = pod_of(objects, "StatefulSet", "nats", "10.1.0.4")
    dns = Endpoint(namespace="kube-system", labels={"k8s-app": "kube-dns"}, ip="10.96.0.10")
    api_server = Endpoint(ip="192.0.2.10")  # the control plane: not a pod
    worker_api = Endpoint(ip="203.0.113.7")  # a worker cluster's API server, elsewhere
    prometheus = Endpoint(namespace="monitoring", labels={"app": "prometheus"}, ip="10.2.0.1")
    stranger = Endpoint(namespace="team-a", labels={"app": "notebook"}, ip="10.3.0.1")
    unlabelled = Endpoint(namespace=NS, labels={"run": "nats-box"}, ip="10.1.0.9")

    open_paths = [
        (api_server, webhook, 9443, "reviews from the API server"),
        (webhook, nats, 4222, "webhook publishes to the inbox"),
        (reconciler, nats, 4222, "reconciler reads and writes the log"),
        (nats, nats_peer, 6222, "NATS cluster routes"),
        (reconciler, api_server, 6443, "manager API server"),
        (reconciler, worker_api, 443, "worker API server"),
        (reconciler, worker_api, 6443, "worker API server"),
        (prometheus, reconciler, 9090, "metrics scrape"),
    ]
    for source, dest, port, why in open_paths:
        assert connects(policies, source, dest, port), why
    for pod in (webhook, reconciler, nats):
        assert connects(policies, pod, dns, 53, "UDP") and connects(policies, pod, dns, 53, "TCP")

    closed_paths = [
        (stranger, nats, 4222, "NATS only from kdispatch pods"),
        (unlabelled, nats, 4222, "not even other pods of the namespace"),
        (stranger, nats, 6222, "routes only between NATS servers"),
        (webhook, nats, 6222, "the webhook is a client, not a route"),
        (webhook, worker_api, 443, "the webhook calls no API server"),
        (webhook, reconciler, 9090, "no traffic between components"),
        (reconciler, webhook, 9443, "no traffic between components"),
        (nats, worker_api, 443, "NATS talks to nothing outside"),
        (api_server, webhook, 8080, "only the webhook port"),
        (worker_api, reconciler, 9090, "metrics from pods only"),
        (stranger, webhook, 9443, "(allowed: the API server has no stable address)"),
    ]
    for source, dest, port, why in closed_paths[:-1]:
        assert not connects(policies, source, dest, port), why
    # The webhook port is open to any source: the restriction is the port, as documented.
    assert connects(policies, *closed_paths[-1][:3])


def test_evaluator_isolation_rules() -> None:
    """The evaluator itself: an unselected pod is open; a selected one only to what a rule allows."""
    policy = {
        "metadata": {"namespace": "a"},
        "spec": {
            "podSelector": {"matchLabels": {"app": "db"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": [{"podSelector": {"matchLabels": {"app": "api"}}}], "ports": [{"port": 5432}]}
            ],
        },
    }
    db = Endpoint(namespace="a", labels={"app": "db"})
    api = Endpoint(namespace="a", labels={"app": "api"})
    other_ns_api = Endpoint(namespace="b", labels={"app": "api"})
    assert connects([policy], api, db, 5432)
    assert not connects([policy], api, db, 5433)
    assert not connects([policy], other_ns_api, db, 5432)
    assert connects([policy], db, api, 80)  # api is not selected; db has no egress policy
