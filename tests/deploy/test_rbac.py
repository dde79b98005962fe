"""RBAC grants every Kubernetes API call the adapter makes (rbac.API_CALLS) and nothing more.

The adapter asserts that each call it makes is in API_CALLS, so the list is the truth; here the
rules bound to each service account are expanded into (group, resource, verb) triples and
compared with it, on the manager (deploy/overlays/*) and on a worker (deploy/worker).
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from reconciler.config import decode_config
from reconciler.service.clusters.objects import SECRETS_NAMESPACE
from reconciler.service.clusters.rbac import API_CALLS
from tests.deploy.conftest import OVERLAYS, find, one, rendered

Grant = tuple[str, str, str]  # (api group, resource or non-resource URL, verb)
SUBJECTS = {
    "manager": ("kdispatch-system", "kdispatch-reconciler"),
    "worker": ("kdispatch-system", "kdispatch-worker"),
}


def expand(rules: list[dict[str, Any]]) -> set[Grant]:
    grants: set[Grant] = set()
    for rule in rules:
        for value in [
            *rule.get("apiGroups", []),
            *rule.get("resources", []),
            *rule["verbs"],
            *rule.get("nonResourceURLs", []),
        ]:
            assert "*" not in value, f"wildcard in {rule}"
        for verb in rule["verbs"]:
            for url in rule.get("nonResourceURLs", []):
                grants.add(("", url, verb))
            for group in rule.get("apiGroups", []):
                for resource in rule.get("resources", []):
                    grants.add((group, resource, verb))
    return grants


def bound_rules(
    objects: list[dict[str, Any]], namespace: str, account: str
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(binding, role) pairs whose subjects include the service account."""
    found = []
    for binding in find(objects, "ClusterRoleBinding") + find(objects, "RoleBinding"):
        subjects = binding.get("subjects", [])
        if not any(
            s["kind"] == "ServiceAccount" and (s["namespace"], s["name"]) == (namespace, account)
            for s in subjects
        ):
            continue
        assert len(subjects) == 1, f"{binding['metadata']['name']} binds only our account"
        ref = binding["roleRef"]
        role = one(objects, ref["kind"], ref["name"])
        if binding["kind"] == "RoleBinding" and ref["kind"] == "Role":
            assert role["metadata"]["namespace"] == binding["metadata"]["namespace"]
        found.append((binding, role))
    return found


def granted(objects: list[dict[str, Any]], cluster: str) -> tuple[set[Grant], dict[Grant, set[str]]]:
    """Every grant, and for grants limited by resourceNames, the names."""
    grants: set[Grant] = set()
    names: dict[Grant, set[str]] = {}
    for _, role in bound_rules(objects, *SUBJECTS[cluster]):
        for rule in role["rules"]:
            expanded = expand([rule])
            grants |= expanded
            if "resourceNames" in rule:
                for grant in expanded:
                    names.setdefault(grant, set()).update(rule["resourceNames"])
    return grants, names


def wanted(cluster: str) -> set[Grant]:
    return {(group, resource, verb) for where, group, resource, verb in API_CALLS if where == cluster}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_manager_rbac_is_exactly_the_manager_api_calls(overlay: str) -> None:
    grants, _ = granted(rendered(overlay), "manager")
    assert grants - wanted("manager") == set(), "granted but never used"
    assert wanted("manager") - grants == set(), "used but not granted"


def test_worker_rbac_is_exactly_the_worker_api_calls() -> None:
    grants, names = granted(rendered("worker"), "worker")
    assert grants - wanted("worker") == set(), "granted but never used"
    assert wanted("worker") - grants == set(), "used but not granted"
    assert names == {}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_manager_reads_only_the_kubeconfig_secrets_the_config_names_and_the_workers_namespace(overlay: str) -> None:
    objects = rendered(overlay)
    _, names = granted(objects, "manager")
    (configmap,) = [
        o for o in find(objects, "ConfigMap") if o["metadata"]["name"].startswith("kdispatch-config-")
    ]
    config = decode_config(yaml.safe_load(configmap["data"]["config.yaml"]))
    refs = [c.kubeconfig.secret_ref for c in config.clusters if c.kubeconfig and c.kubeconfig.secret_ref]
    assert refs, "the shipped config registers a worker through a Secret"
    assert names == {("", "secrets", "get"): {ref.name for ref in refs}}
    # Besides those, Secrets are readable only in the namespace of the WorkerClusters' kubeconfigs.
    unnamed = [
        role["metadata"]["namespace"]
        for _, role in bound_rules(objects, *SUBJECTS["manager"])
        for rule in role["rules"]
        if "secrets" in rule.get("resources", []) and "resourceNames" not in rule
    ]
    assert unnamed == [SECRETS_NAMESPACE]
    for ref in refs:
        roles = [r for _, r in bound_rules(objects, *SUBJECTS["manager"]) if r["kind"] == "Role"]
        assert any(r["metadata"]["namespace"] == ref.namespace for r in roles), ref
    # Secrets are never granted cluster-wide.
    for binding, role in bound_rules(objects, *SUBJECTS["manager"]):
        if role["kind"] == "ClusterRole":
            assert not any("secrets" in rule.get("resources", []) for rule in role["rules"]), binding[
                "metadata"
            ]["name"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_webhook_has_no_api_access(overlay: str) -> None:
    objects = rendered(overlay)
    assert bound_rules(objects, "kdispatch-system", "kdispatch-webhook") == []
    account = one(objects, "ServiceAccount", "kdispatch-webhook")
    assert account["automountServiceAccountToken"] is False
    pod = one(objects, "Deployment", "kdispatch-webhook")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "kdispatch-webhook" and pod["automountServiceAccountToken"] is False


def test_worker_token_secret_belongs_to_the_worker_account() -> None:
    objects = rendered("worker")
    token = one(objects, "Secret", "kdispatch-worker-token")
    assert token["type"] == "kubernetes.io/service-account-token"
    assert token["metadata"]["annotations"]["kubernetes.io/service-account.name"] == "kdispatch-worker"
    assert (
        one(objects, "ServiceAccount", "kdispatch-worker")["metadata"]["namespace"]
        == token["metadata"]["namespace"]
    )


def test_expansion_sees_an_extra_verb() -> None:
    """The comparison can fail: one verb too many is a difference."""
    rules = [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "update"]}]
    assert ("batch", "jobs", "update") in expand(rules)
    with pytest.raises(AssertionError, match="wildcard"):
        expand([{"apiGroups": ["*"], "resources": ["jobs"], "verbs": ["get"]}])
