"""The webhook and the reconciler read one kind table (eventlog/kube/kinds.py); what each side does
with a kind must fit what the other did: every kind the webhook holds is granted in RBAC, and the
copy the reconciler makes of a held object is released from exactly that hold."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from eventlog import events as ev
from eventlog.kube.kinds import SUPPORTED_KINDS, KindInfo
from reconciler.service.clusters import rbac
from reconciler.service.clusters.backfill import user_suspended
from reconciler.service.clusters.base import RemoteSpec
from reconciler.service.clusters.manager import submitted_msg_id, update_msg_id
from reconciler.service.clusters.remote import remote_manifest
from webhook import admit, jsonpatch, stamps
from webhook.review import decode_review


def test_every_kind_is_granted_on_both_sides() -> None:
    calls = set(rbac.API_CALLS)
    for k in SUPPORTED_KINDS:
        for verb in ("list", "watch", "get", "patch"):
            assert ("manager", k.group, k.plural, verb) in calls, (k.kind, verb)
        for verb in ("list", "watch", "get", "create", "delete"):
            assert ("worker", k.group, k.plural, verb) in calls, (k.kind, verb)
    assert ("manager", "", "pods/status", "patch") in calls
    assert len(rbac.API_CALLS) == len(calls)  # two versions of one resource are one grant


def test_the_update_ids_both_sides_use_agree() -> None:
    assert update_msg_id("u-1", "41") == stamps.update_msg_id("u-1", "41")
    assert submitted_msg_id("u-1") == stamps.submitted_msg_id("u-1")


def _held_by_the_webhook(info: KindInfo) -> dict[str, Any]:
    obj = {
        "apiVersion": info.api_version,
        "kind": info.kind,
        "metadata": {"name": "j", "namespace": "team-a", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        # A RayJob without a cluster of its own runs on an existing one: not dispatchable.
        "spec": {"rayClusterSpec": {}} if info.family == "ray-job" else {},
    }
    request = {
        "uid": "rev-1",
        "kind": {"group": info.group, "version": info.version, "kind": info.kind},
        "operation": "CREATE",
        "namespace": "team-a",
        "name": "j",
        "object": obj,
    }
    _, parsed = decode_review(
        json.dumps(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
        ).encode()
    )
    outcome = admit.mutate(parsed, admit.Settings())
    assert outcome.allowed and outcome.response.patch, info
    held = jsonpatch.apply(obj, json.loads(base64.b64decode(outcome.response.patch)))
    held["metadata"]["uid"] = "u-1"
    return held


@pytest.mark.parametrize("info", SUPPORTED_KINDS, ids=lambda k: f"{k.kind}.{k.version}")
def test_a_worker_copy_is_released_from_the_webhooks_hold(info: KindInfo) -> None:
    held = _held_by_the_webhook(info)
    assert admit.is_held(info, held)
    assert not user_suspended(info, held)  # held by kdispatch, which is not the user suspending it
    ref = ev.JobRef(namespace="team-a", name="j", uid="u-1", api_version=info.api_version, kind=info.kind)
    copy = remote_manifest(
        RemoteSpec(job=ref, cluster="w", attempt=1, manifest=held), kind=info, manager_id="m", kueue=False
    )
    assert not admit.is_held(info, copy)
