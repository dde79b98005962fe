"""What the API server does with a webhook entry before it calls the webhook: rules, selectors,
matchConditions. Used to check that deploy/'s WebhookConfigurations send the webhook exactly the
requests it acts on.
"""

from __future__ import annotations

from typing import Any

import celpy

from eventlog.kube.kinds import lookup_api_version

Obj = dict[str, Any]


def rule_resources(entry: Obj, operation: str) -> set[tuple[str, str, str]]:
    """(group, version, resource) triples an entry's rules cover for ``operation``."""
    covered = set()
    for rule in entry["rules"]:
        if operation not in rule["operations"] and "*" not in rule["operations"]:
            continue
        for group in rule["apiGroups"]:
            for version in rule["apiVersions"]:
                for resource in rule["resources"]:
                    covered.add((group, version, resource))
    return covered


def selector_matches(selector: Obj | None, labels: dict[str, str]) -> bool:
    """metav1.LabelSelector semantics (an absent or empty selector matches everything)."""
    if not selector:
        return True
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


_env = celpy.Environment()
_programs: dict[str, Any] = {}


def cel(expression: str, activation: Obj) -> bool:
    if expression not in _programs:
        _programs[expression] = _env.program(_env.compile(expression))
    result = _programs[expression].evaluate({k: celpy.json_to_cel(v) for k, v in activation.items()})
    if isinstance(result, Exception):
        raise result
    return bool(result)


def entry_calls_webhook(entry: Obj, *, operation: str, obj: Obj, namespace_labels: dict[str, str]) -> bool:
    """Would the API server send this request (CREATE/UPDATE of ``obj``, or DELETE of it) to ``entry``?"""
    if not selector_matches(entry.get("namespaceSelector"), namespace_labels):
        return False
    labels = obj.get("metadata", {}).get("labels", {}) or {}
    if not selector_matches(entry.get("objectSelector"), labels):
        return False
    new, old = (None, obj) if operation == "DELETE" else (obj, None)
    info = lookup_api_version(obj["apiVersion"], obj["kind"])
    group, _, version = obj["apiVersion"].rpartition("/")
    request = {
        "operation": operation,
        "namespace": obj.get("metadata", {}).get("namespace", ""),
        "resource": {"group": group, "version": version, "resource": info.plural if info else ""},
    }
    activation = {"object": new, "oldObject": old, "request": request}
    return all(cel(cond["expression"], activation) for cond in entry.get("matchConditions", []))
