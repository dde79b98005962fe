"""The admission decision, pure: an AdmissionRequest in, a response and the events to record out.

Two hooks, as in Kubernetes:

- ``mutate`` (``/mutate``, no side effects): validates the placement annotations, writes the
  canonical ``kdispatch.io/placement`` annotation and the pod sets and priority it computed
  (``kdispatch.io/pod-sets``, ``kdispatch.io/priority``: see stamps.py; recomputed at UPDATE too),
  holds the job (suspend, the kind's managedBy, a scheduling gate for Pods) and answers a
  JSONPatch. A normalized object gives no patch.
- ``validate`` (``/validate``, side effects except on dryRun): sees the object after every
  mutation, with its final name and uid (mutating admission runs before the API server fills
  ``metadata.uid`` and the name of a ``generateName`` object), checks it again and says what to
  record: ``JobSubmitted`` at CREATE, ``JobUpdated`` when an UPDATE changes pod sets, suspension
  or priority, ``JobDeleted`` at DELETE. Each with the review uid as Nats-Msg-Id, except
  ``JobSubmitted``: ``sub/<uid>``, and ``JobUpdated``: ``upd/<uid>/<old resourceVersion>``, the
  ids the manager watcher gives the same fact, so the inbox keeps one.

Only objects that opt in (the queue label, or any kdispatch / Kueue-dispatcher annotation) are
touched; everything else is allowed as it is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from eventlog import events as ev
from eventlog.kube import kinds, names, queues
from eventlog.kube.kinds import KindInfo
from webhook import jsonpatch, objects, placement, podsets, priority, stamps
from webhook.objects import ObjectMeta
from webhook.quote import short
from webhook.review import AdmissionRequest, AdmissionResponse, Status, encode_patch


@dataclass(frozen=True)
class Settings:
    priority_classes: Mapping[str, int] = field(default_factory=dict)
    # The queue configuration (``--queues``): with it every opted-in job is resolved to a
    # LocalQueue and ClusterQueue and its priority class checked (eventlog/kube/queues.py);
    # without it, one default queue as before.
    queues: ev.QueuesConfigured | None = None


# Structs, not frozen dataclasses: one of each per review, and a frozen dataclass's __init__ sets
# every field through object.__setattr__.
class Record(msgspec.Struct, frozen=True):
    """An event to publish, with its Nats-Msg-Id."""

    event: ev.InputEvent
    msg_id: str


class Outcome(msgspec.Struct, frozen=True, kw_only=True):
    response: AdmissionResponse
    reason: str  # for metrics: "allowed", "ignored", or why it was denied
    records: list[Record] = msgspec.field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return self.response.allowed


class _Denied(Exception):
    def __init__(self, reason: str, message: str, *, code: int = 400) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.code = code


# ---- shared reading ------------------------------------------------------------------------------


def _metadata(obj: dict[str, Any], *, of: str) -> ObjectMeta:
    """The object's metadata, typed. The API server decodes metadata before any webhook sees it,
    so only a hand-made review can fail here; it is denied with the path, not guessed at."""
    try:
        return objects.metadata(obj)
    except objects.ObjectError as err:
        raise _Denied("invalid-object", f"kdispatch: cannot read the metadata of {of}: {err}") from None


def opted_in(meta: ObjectMeta) -> bool:
    if names.QUEUE_LABEL in meta.label_map:
        return True
    return any(placement.is_placement_annotation(name) for name in meta.annotation_map)


def _get(obj: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = obj
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def _placement(meta: ObjectMeta) -> ev.Placement:
    return _placement_canonical(meta)[0]


def _placement_canonical(meta: ObjectMeta) -> tuple[ev.Placement, str]:
    try:
        return placement.parse_with_canonical(meta.annotation_map)
    except placement.PlacementError as err:
        raise _Denied("invalid-placement", f"kdispatch: invalid placement:\n{err}") from None


def _pod_sets(info: KindInfo, obj: dict[str, Any], meta: ObjectMeta) -> tuple[list[podsets.PodSetSpec], list[ev.PodSet]]:
    try:
        specs = podsets.extract(info, obj, meta=meta)
        return specs, podsets.to_pod_sets(specs)
    except podsets.PodSetError as err:
        raise _Denied("invalid-podsets", f"kdispatch: cannot read the pod sets of this {info.kind}: {err}") from None


def _runtime_ms(meta: ObjectMeta) -> int | None:
    try:
        placement.parse_expected_duration_ms(meta.annotation_map)  # checked, read back from the manifest
        return placement.parse_runtime_ms(meta.annotation_map)
    except placement.PlacementError as err:
        raise _Denied("invalid-placement", f"kdispatch: {err}") from None


def _check_managed_by(info: KindInfo, obj: Mapping[str, Any]) -> None:
    if info.managed_by_path is None:
        return
    current = _get(obj, info.managed_by_path)
    if current is None or current == names.MANAGED_BY or current in info.default_controllers:
        return
    where = ".".join(info.managed_by_path)
    raise _Denied(
        "managed-elsewhere",
        f"kdispatch: {where} is {short(current)}: another controller manages this {info.kind}, so kdispatch "
        f"cannot dispatch it. Remove {where} (kdispatch sets {names.MANAGED_BY!r}), or remove the "
        f"{names.QUEUE_LABEL} label and the kdispatch annotations to run it without kdispatch.",
        code=403,
    )


def is_held(info: KindInfo, obj: Mapping[str, Any]) -> bool:
    if info.hold == "gate":
        gates = _get(obj, ("spec", "schedulingGates"))
        return isinstance(gates, list) and {"name": names.POD_SCHEDULING_GATE} in gates
    if info.hold == "inactive":
        return _get(obj, info.suspend_path) is False
    return _get(obj, info.suspend_path) is True


def user_suspended(info: KindInfo, obj: Mapping[str, Any]) -> bool:
    """Suspended by its user, as ``JobUpdated.suspended`` means (the manager watcher reads it the
    same way): a job kdispatch holds (managedBy ours, our gate, inactive) is not."""
    if info.hold != "suspend":
        return False
    if info.managed_by_path is not None and _get(obj, info.managed_by_path) == names.MANAGED_BY:
        return False
    return _get(obj, info.suspend_path) is True


def _hold_ops(info: KindInfo, obj: dict[str, Any]) -> list[jsonpatch.Op]:
    if info.hold == "gate":
        gates = _get(obj, ("spec", "schedulingGates"))
        gate = {"name": names.POD_SCHEDULING_GATE}
        if not isinstance(gates, list):
            return jsonpatch.set_value(obj, ("spec", "schedulingGates"), value=[gate])
        return [] if gate in gates else [{"op": "add", "path": "/spec/schedulingGates/-", "value": gate}]
    held = info.hold != "inactive"
    if info.managed_by_path is None:
        return jsonpatch.set_value(obj, info.suspend_path, value=held)
    # suspend and managedBy share a parent on every kind: one nested add when it is missing.
    parent = info.suspend_path[:-1]
    assert info.managed_by_path[:-1] == parent
    wanted = {info.suspend_path[-1]: held, info.managed_by_path[-1]: names.MANAGED_BY}
    existing = _get(obj, parent)
    if not isinstance(existing, dict):
        return jsonpatch.set_value(obj, parent, value=wanted)
    return jsonpatch.members(existing, parent, wanted)


def _annotation_ops(obj: dict[str, Any], values: Mapping[str, str]) -> list[jsonpatch.Op]:
    annotations = _get(obj, ("metadata", "annotations"))
    if not isinstance(annotations, dict):  # one add for the whole map: later adds would replace it
        return jsonpatch.set_value(obj, ("metadata", "annotations"), value=dict(values))
    return jsonpatch.members(annotations, ("metadata", "annotations"), values)


def _stamps(info: KindInfo, obj: dict[str, Any], *, sets: list[podsets.PodSetSpec], settings: Settings) -> dict[str, str]:
    """The pod sets and priority the manager watcher reads back (see webhook/stamps.py)."""
    try:
        resolved = podsets.to_pod_sets(sets)
    except podsets.PodSetError as err:
        raise _Denied("invalid-podsets", f"kdispatch: cannot read the pod sets of this {info.kind}: {err}") from None
    name = priority.priority_class(kind=info.kind, obj=obj, sets=sets)
    return {
        placement.POD_SETS_ANNOTATION: stamps.pod_sets_json(resolved),
        placement.PRIORITY_ANNOTATION: stamps.priority_json(name, _priority_value(name, settings)),
    }


def _priority_value(name: str | None, settings: Settings) -> int:
    """With a queue config, the WorkloadPriorityClass's value (admission denies a class it does not
    have, so 0 only for no class); else the configured mapping, as before."""
    if settings.queues is not None:
        return settings.queues.priority_classes.get(name, 0) if name is not None else 0
    return priority.priority_value(name, settings.priority_classes)


# ---- queues (only with a queue config) -----------------------------------------------------------

# HTTP codes as Kubernetes gives them: a value that names nothing is Invalid (422), a value that
# exists but is not this namespace's to use is Forbidden (403).
_QUEUE_CODES: Mapping[queues.DenyReason, int] = {
    "queue-not-found": 422,
    "no-default-queue": 422,
    "cluster-queue-not-found": 422,
    "namespace-not-selected": 403,
    "priority-class-not-found": 422,
    "priority-class-not-allowed": 403,
}


def _namespace(meta: ObjectMeta, request: AdmissionRequest) -> str:
    # At /mutate of a CREATE the object may not carry its namespace yet; the request always does.
    return meta.namespace or request.namespace


def _resolve(request: AdmissionRequest, target: _Target, *, specs: list[podsets.PodSetSpec], settings: Settings) -> queues.Resolved | None:
    """The job's queue and priority, or ``_Denied`` with the reason; None without a queue config."""
    config = settings.queues
    if config is None:
        return None
    name, source = priority.priority_class_and_source(kind=target.info.kind, obj=target.obj, sets=specs)
    result = queues.resolve(
        config,
        namespace=_namespace(target.meta, request),
        queue_name=target.meta.label_map.get(names.QUEUE_LABEL),
        priority_class=name,
        priority_source=source,
        kind=target.info.kind,
    )
    if isinstance(result, queues.Denied):
        raise _Denied(result.reason, result.message, code=_QUEUE_CODES[result.reason])
    return result


def _check_queue_kept(request: AdmissionRequest, target: _Target, *, specs: list[podsets.PodSetSpec], settings: Settings) -> None:
    """At UPDATE of a submitted job, with a queue config: its LocalQueue cannot change, and a new
    priority class must exist and be allowed by its ClusterQueue.

    Kueue lets the queue-name label change while the job is suspended. kdispatch keeps every
    submitted job suspended here and the log records the queue once, at submission, so a change
    would be silently ignored: it is refused instead."""
    config = settings.queues
    if config is None or target.old_meta is None or target.old is None:
        return
    info, meta, old_meta = target.info, target.meta, target.old_meta
    before = queues.effective_queue_name(old_meta.label_map.get(names.QUEUE_LABEL))
    after = queues.effective_queue_name(meta.label_map.get(names.QUEUE_LABEL))
    if before != after:
        raise _Denied(
            "queue-changed",
            f'kdispatch: the queue of a submitted {info.kind} cannot change ({names.QUEUE_LABEL}: "{before}" -> '
            f'"{after}", where an absent label means "{queues.DEFAULT_QUEUE}"); it was recorded at submission. '
            f"Delete the job and submit it again with the new queue.",
            code=403,
        )
    name, source = priority.priority_class_and_source(kind=info.kind, obj=target.obj, sets=specs)
    old_name = priority.priority_class(kind=info.kind, obj=target.old, sets=_specs_or_none(info, target.old, old_meta))
    if name == old_name:
        return
    result = queues.resolve(
        config, namespace=_namespace(meta, request), queue_name=meta.label_map.get(names.QUEUE_LABEL),
        priority_class=name, priority_source=source, kind=info.kind,
    )
    denied = result if isinstance(result, queues.Denied) else None
    if denied is not None and denied.reason not in ("priority-class-not-found", "priority-class-not-allowed"):
        # The queue no longer resolves (the config changed since submission): that is the
        # dispatcher's to report; the class must still exist.
        checked = queues.check_priority(config, None, priority_class=name, source=source)
        denied = checked if isinstance(checked, queues.Denied) else None
    if denied is not None:
        raise _Denied(denied.reason, denied.message, code=_QUEUE_CODES[denied.reason])


def _specs_or_none(info: KindInfo, obj: dict[str, Any], meta: ObjectMeta) -> list[podsets.PodSetSpec]:
    try:
        return podsets.extract(info, obj, meta=meta)
    except (podsets.PodSetError, podsets.NotDispatchable):
        return []


def _allow(
    uid: str,
    reason: str,
    *,
    ops: list[jsonpatch.Op] | None = None,
    warnings: list[str] | None = None,
    record: Record | None = None,
) -> Outcome:
    patch = encode_patch(ops) if ops else None
    response = AdmissionResponse(
        uid=uid, allowed=True, patch=patch, patch_type="JSONPatch" if patch else None, warnings=warnings or None
    )
    return Outcome(response=response, reason=reason, records=[record] if record is not None else [])


def _deny(uid: str, err: _Denied) -> Outcome:
    reason = {403: "Forbidden", 422: "Invalid"}.get(err.code, "BadRequest")
    status = Status(code=err.code, message=err.message, reason=reason)
    return Outcome(response=AdmissionResponse(uid=uid, allowed=False, status=status), reason=err.reason)


class _Target(msgspec.Struct, frozen=True):
    """A supported kind that opts in: the object as sent (patched, recorded as the manifest) and
    its metadata as decoded; at UPDATE the stored object too."""

    info: KindInfo
    obj: dict[str, Any]
    meta: ObjectMeta
    old: dict[str, Any] | None = None
    old_meta: ObjectMeta | None = None

    @property
    def recorded(self) -> bool:
        """At UPDATE: the stored object was admitted by kdispatch at CREATE."""
        return _recorded(self.old_meta)


def _target(request: AdmissionRequest) -> _Target | None:
    info = kinds.lookup(group=request.kind.group, version=request.kind.version, kind=request.kind.kind)
    obj = request.old_object if request.operation == "DELETE" else request.object
    if info is None or not isinstance(obj, dict):
        return None
    meta = _metadata(obj, of=f"this {info.kind}")
    old, old_meta = None, None
    if request.operation == "UPDATE" and isinstance(request.old_object, dict):
        old, old_meta = request.old_object, _metadata(request.old_object, of=f"the stored {info.kind} (oldObject)")
    # A submitted job stays kdispatch's even if an update drops every opt-in mark.
    if not opted_in(meta) and not _recorded(old_meta):
        return None
    if _part_of_another(info, meta):
        return None
    return _Target(info=info, obj=obj, meta=meta, old=old, old_meta=old_meta)


def _part_of_another(info: KindInfo, meta: ObjectMeta) -> bool:
    """Made by a controller whose own object is the unit of dispatch (a JobSet's Jobs, a TrainJob's
    JobSet) or runs here (any controller's Pods): children inherit the queue label from their
    templates, and holding them would hold them forever. Kueue skips them alike ("an ancestor is
    already managed"). A CronJob's Jobs are submissions of their own."""
    for owner in meta.owner_references or ():
        if owner.controller is not True:
            continue
        if info.kind == "Pod":
            return True
        if kinds.lookup_api_version(owner.api_version, owner.kind) is not None:
            return True
    return False


def _recorded(meta: ObjectMeta | None) -> bool:
    """Admitted by kdispatch at CREATE (the canonical annotation is there)."""
    return meta is not None and placement.PLACEMENT_ANNOTATION in meta.annotation_map


def _check_placement_kept(info: KindInfo, old: ObjectMeta, *, new: ev.Placement) -> None:
    # The webhook holds no state, so it cannot tell whether the dispatcher already acted on the
    # recorded placement: once recorded, the placement is what the dispatch decisions used.
    old_placement = _placement(old)
    if old_placement == new:
        return
    before, after = placement.canonical_dict(old_placement), placement.canonical_dict(new)
    changed = [k for k in sorted(before) if before[k] != after[k]]
    cluster = old.annotation_map.get(placement.CLUSTER_ANNOTATION)
    where = f"it runs on cluster {short(cluster)}" if cluster else "dispatch decisions rest on it"
    raise _Denied(
        "placement-changed",
        f"kdispatch: the placement of a submitted {info.kind} cannot change (changed: {', '.join(changed)}); "
        f"it was recorded at submission and {where}. Delete the job and submit it again with the new placement.",
        code=403,
    )


# ---- /mutate -------------------------------------------------------------------------------------


def mutate(request: AdmissionRequest, settings: Settings) -> Outcome:
    if request.operation not in ("CREATE", "UPDATE"):
        return _allow(request.uid, "ignored")
    try:
        target = _target(request)
        if target is None:
            return _allow(request.uid, "ignored")
        if request.operation == "UPDATE":
            return _mutate_update(request, target, settings=settings)
        return _mutate_create(request, target, settings=settings)
    except _Denied as err:
        return _deny(request.uid, err)


def _mutate_create(request: AdmissionRequest, target: _Target, *, settings: Settings) -> Outcome:
    info, obj, meta = target.info, target.obj, target.meta
    _, canonical = _placement_canonical(meta)
    try:
        sets = podsets.extract(info, obj, meta=meta)
    except podsets.PodSetError as err:
        return _deny(request.uid, _Denied("invalid-podsets", f"kdispatch: cannot read the pod sets of this {info.kind}: {err}"))
    except podsets.NotDispatchable as err:
        return _allow(request.uid, "not-dispatchable", warnings=[f"kdispatch: {err}"])
    _runtime_ms(meta)
    _check_managed_by(info, obj)
    _resolve(request, target, specs=sets, settings=settings)
    values = {placement.PLACEMENT_ANNOTATION: canonical, **_stamps(info, obj, sets=sets, settings=settings)}
    ops = _annotation_ops(obj, values) + _hold_ops(info, obj)
    warnings = None
    if not sets:  # e.g. an AppWrapper of components whose pods kdispatch cannot infer
        warnings = [f"kdispatch: no pod sets found in this {info.kind}: it is dispatched as needing no resources"]
    return _allow(request.uid, "allowed", ops=ops, warnings=warnings)


def _mutate_update(request: AdmissionRequest, target: _Target, *, settings: Settings) -> Outcome:
    info, obj, meta = target.info, target.obj, target.meta
    if target.old_meta is None or not target.recorded:
        return _allow(
            request.uid,
            "not-recorded",
            warnings=[f"kdispatch: this {info.kind} was not admitted by kdispatch when it was created, so it is not dispatched"],
        )
    spec, canonical = _placement_canonical(meta)
    _check_placement_kept(info, target.old_meta, new=spec)
    if settings.queues is not None:
        _check_queue_kept(request, target, specs=_specs_or_none(info, obj, meta), settings=settings)
    values = {placement.PLACEMENT_ANNOTATION: canonical}
    # /validate denies unreadable pod sets with the same message, or leaves the job alone
    with contextlib.suppress(podsets.PodSetError, podsets.NotDispatchable):
        values.update(_stamps(info, obj, sets=podsets.extract(info, obj, meta=meta), settings=settings))
    return _allow(request.uid, "allowed", ops=_annotation_ops(obj, values))


# ---- /validate -----------------------------------------------------------------------------------


def validate(request: AdmissionRequest, settings: Settings) -> Outcome:
    if request.operation == "CONNECT":
        return _allow(request.uid, "ignored")
    try:
        target = _target(request)
        if target is None:
            return _allow(request.uid, "ignored")
        if request.operation == "DELETE":
            return _validate_delete(request, target)
        if request.operation == "UPDATE":
            return _validate_update(request, target, settings=settings)
        return _validate_create(request, target, settings=settings)
    except _Denied as err:
        return _deny(request.uid, err)


def job_ref(info: KindInfo, meta: ObjectMeta, *, request: AdmissionRequest) -> ev.JobRef:
    return ev.JobRef(
        namespace=meta.namespace or request.namespace,
        name=meta.name or request.name,
        uid=meta.uid or "",
        api_version=info.api_version,
        kind=info.kind,
    )


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _manifest(obj: Mapping[str, Any], meta: ObjectMeta) -> dict[str, Any]:
    """The object for the remote copy, without what belongs to the manager cluster: status,
    managedFields, and kubectl's copy of the object as last applied there (often half the size).
    ``meta`` is its metadata decoded: the metadata as sent is a JSON object (or absent)."""
    # Copies with a key dropped (each keeps the order of the rest, which the event's bytes follow).
    out_meta = dict(obj.get("metadata") or {})
    out_meta.pop("managedFields", None)
    if LAST_APPLIED in meta.annotation_map:
        out_meta["annotations"] = {k: v for k, v in meta.annotation_map.items() if k != LAST_APPLIED}
    out = dict(obj)
    out.pop("status", None)
    out["metadata"] = out_meta
    return out


def _msg_id(request: AdmissionRequest, ref: ev.JobRef) -> str:
    return request.uid or f"{ref.namespace}/{ref.name}/{ref.uid}"


def _validate_create(request: AdmissionRequest, target: _Target, *, settings: Settings) -> Outcome:
    info, obj, meta = target.info, target.obj, target.meta
    spec = _placement(meta)
    try:
        specs, sets = _pod_sets(info, obj, meta)
    except podsets.NotDispatchable:
        return _allow(request.uid, "not-dispatchable")
    runtime_ms = _runtime_ms(meta)
    _check_managed_by(info, obj)
    if not is_held(info, obj) or not _recorded(meta):
        raise _Denied(
            "not-held",
            f"kdispatch: this {info.kind} opts in to kdispatch but was not held by its mutating webhook "
            f"(no {placement.PLACEMENT_ANNOTATION} annotation, or not suspended): it would run here and on a "
            "worker cluster. Check that the kdispatch MutatingWebhookConfiguration is installed and covers this kind.",
        )
    resolved = _resolve(request, target, specs=specs, settings=settings)
    warnings: list[str] = list(resolved.warnings) if resolved is not None else []
    if request.dry_run:
        return _allow(request.uid, "allowed", warnings=warnings)
    ref = job_ref(info, meta, request=request)
    group = podsets.pod_group_name(meta) if info.kind == "Pod" else ""
    msg_id = stamps.submitted_msg_id(ref.uid)
    if group:
        # One submission per pod group: every pod of the group maps to the same message id, so the
        # inbox keeps the first and drops the others (see docs/webhook.md, "Pod groups").
        ref = ev.JobRef(namespace=ref.namespace, name=group, uid=ref.uid, api_version=ref.api_version, kind=ref.kind)
        msg_id = f"podgroup/{ref.namespace}/{group}"
    if not ref.name or not ref.uid:
        warnings.append("kdispatch: the object has no name or uid yet; the manager watcher will record it")
        return _allow(request.uid, "allowed", warnings=warnings)
    name = priority.priority_class(kind=info.kind, obj=obj, sets=specs)
    event = ev.JobSubmitted(
        job=ref,
        pod_sets=sets,
        priority=_priority_value(name, settings),
        priority_class=name,
        placement=spec,
        queue=meta.label_map.get(names.QUEUE_LABEL),
        runtime_ms=runtime_ms,
        manifest=_manifest(obj, meta),
        cluster_queue=resolved.cluster_queue if resolved is not None else None,
    )
    return _allow(request.uid, "allowed", warnings=warnings, record=Record(event, msg_id))


def _validate_update(request: AdmissionRequest, target: _Target, *, settings: Settings) -> Outcome:
    info, obj, meta, old, old_meta = target.info, target.obj, target.meta, target.old, target.old_meta
    if old is None or old_meta is None or not target.recorded:
        return _allow(request.uid, "not-recorded")
    spec = _placement(meta)
    _check_placement_kept(info, old_meta, new=spec)
    try:
        specs, sets = _pod_sets(info, obj, meta)
    except podsets.NotDispatchable:
        return _allow(request.uid, "not-dispatchable")
    _check_queue_kept(request, target, specs=specs, settings=settings)
    try:
        old_specs = podsets.extract(info, old, meta=old_meta)
        old_sets = podsets.to_pod_sets(old_specs)
    except (podsets.PodSetError, podsets.NotDispatchable):
        old_specs, old_sets = [], []
    name = priority.priority_class(kind=info.kind, obj=obj, sets=specs)
    old_name = priority.priority_class(kind=info.kind, obj=old, sets=old_specs)
    suspended = user_suspended(info, obj)
    if sets == old_sets and suspended == user_suspended(info, old) and name == old_name:
        return _allow(request.uid, "allowed")
    if request.dry_run:
        return _allow(request.uid, "allowed")
    ref = job_ref(info, meta, request=request)
    event = ev.JobUpdated(
        job=ref,
        pod_sets=sets,
        suspended=suspended,
        priority=_priority_value(name, settings),
        priority_class=name,
        manifest=_manifest(obj, meta),
    )
    return _allow(request.uid, "allowed", record=Record(event, _update_msg_id(request, ref, old_meta)))


def _update_msg_id(request: AdmissionRequest, ref: ev.JobRef, old: ObjectMeta) -> str:
    """The same id the manager watcher gives this change, so the inbox records it once."""
    if not ref.uid or not old.resource_version:
        return _msg_id(request, ref)
    return stamps.update_msg_id(ref.uid, old.resource_version)


def _validate_delete(request: AdmissionRequest, target: _Target) -> Outcome:
    if request.dry_run or not _recorded(target.meta):
        return _allow(request.uid, "ignored")
    ref = job_ref(target.info, target.meta, request=request)
    return _allow(request.uid, "allowed", record=Record(ev.JobDeleted(job=ref), _msg_id(request, ref)))
