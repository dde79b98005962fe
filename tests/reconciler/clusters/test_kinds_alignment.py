"""The reconciler's copy of the kind table agrees with the webhook's (the reconciler may not import
the webhook, so it keeps its own list): every kind the webhook holds is watched on the manager,
copied to workers with its hold released the same way, and granted in RBAC."""

from __future__ import annotations

from reconciler.service.clusters import rbac
from reconciler.service.clusters.backfill import MANAGED_BY, POD_SETS_ANNOTATION, PRIORITY_ANNOTATION
from reconciler.service.clusters.kinds import KINDS, POD_SCHEDULING_GATE
from reconciler.service.clusters.manager import update_msg_id
from webhook import kinds as webhook_kinds
from webhook import placement, stamps


def test_the_reconciler_kinds_are_the_webhook_kinds() -> None:
    ours = [(k.group, k.version, k.kind, k.plural, k.hold) for k in KINDS]
    theirs = [(k.group, k.version, k.kind, k.plural, k.hold) for k in webhook_kinds.SUPPORTED_KINDS]
    assert ours == theirs


def test_hold_paths_agree() -> None:
    for ours, theirs in zip(KINDS, webhook_kinds.SUPPORTED_KINDS, strict=True):
        assert ours.managed_by_path == theirs.managed_by_path, ours.kind
        if theirs.hold != "gate":
            assert ours.suspend_path == theirs.suspend_path, ours.kind
    assert POD_SCHEDULING_GATE == webhook_kinds.POD_SCHEDULING_GATE
    assert MANAGED_BY == webhook_kinds.MANAGED_BY


def test_the_annotations_and_update_ids_both_sides_use_agree() -> None:
    assert (POD_SETS_ANNOTATION, PRIORITY_ANNOTATION) == (
        placement.POD_SETS_ANNOTATION,
        placement.PRIORITY_ANNOTATION,
    )
    assert update_msg_id("u-1", "41") == stamps.update_msg_id("u-1", "41")


def test_every_kind_is_granted_on_both_sides() -> None:
    calls = set(rbac.API_CALLS)
    for k in KINDS:
        for verb in ("list", "watch", "get", "patch"):
            assert ("manager", k.group, k.plural, verb) in calls, (k.kind, verb)
        for verb in ("list", "watch", "get", "create", "delete"):
            assert ("worker", k.group, k.plural, verb) in calls, (k.kind, verb)
    assert ("manager", "", "pods/status", "patch") in calls
    assert len(rbac.API_CALLS) == len(calls)  # two versions of one resource are one grant
