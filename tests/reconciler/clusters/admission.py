"""The real webhook's admission decision (``webhook.admit``, pure), applied the way the API server
applies it: tests put on the emulated manager exactly what the webhook would leave there.

Tests may import both packages; the reconciler itself never imports the webhook.
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

from webhook import admit, jsonpatch
from webhook.review import AdmissionRequest, decode_review

SETTINGS = admit.Settings(priority_classes={"high": 1000})


def request(
    obj: dict[str, Any], *, operation: str = "CREATE", old: dict[str, Any] | None = None, uid: str = "rev"
) -> AdmissionRequest:
    group, _, version = obj["apiVersion"].rpartition("/")
    meta = obj.get("metadata") or {}
    body = {
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": obj["kind"]},
        "operation": operation,
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "object": obj,
        "oldObject": old,
    }
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body}
    return decode_review(json.dumps(review).encode())[1]


def _patched(obj: dict[str, Any], outcome: admit.Outcome) -> dict[str, Any]:
    assert outcome.allowed, outcome.response.status
    patch = outcome.response.patch
    return jsonpatch.apply(obj, json.loads(base64.b64decode(patch))) if patch else copy.deepcopy(obj)


def admitted(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as /mutate leaves it at CREATE (held, placement and pod sets written)."""
    return _patched(obj, admit.mutate(request(obj), SETTINGS))


def updated(old: dict[str, Any], new: dict[str, Any]) -> tuple[dict[str, Any], list[admit.Record]]:
    """An UPDATE: what /mutate makes of ``new``, and what /validate records for it."""
    obj = _patched(new, admit.mutate(request(new, operation="UPDATE", old=old), SETTINGS))
    outcome = admit.validate(request(obj, operation="UPDATE", old=old), SETTINGS)
    assert outcome.allowed, outcome.response.status
    return obj, outcome.records
