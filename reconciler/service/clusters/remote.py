"""Pure helpers of the Kubernetes worker adapter: the remote copy's manifest, and the facts an
observed remote object (or its Kueue Workload) stands for. No I/O, so they are tested directly.

Choices (see docs/clusters.md):
- the copy keeps the manager object's namespace and name, drops server-set metadata and status,
  clears ``managedBy`` (the kind's own controller runs it there) and carries our origin labels;
- on a worker with Kueue the copy stays suspended and keeps its queue label: Kueue admits it and
  unsuspends it, and its Workload tells us about admission and eviction; on a worker without
  Kueue it is created unsuspended (admitted = started) and the queue label is dropped;
- a copy is finished when its kind reports a terminal condition (Complete/Failed for Job,
  Completed/Failed for JobSet, etc.).
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from msgspec import Struct

from eventlog import events as ev
from eventlog.kube.kinds import KindInfo
from eventlog.kube.names import ATTEMPT_LABEL, JOB_UID_LABEL, ORIGIN_LABEL, POD_SCHEDULING_GATE, QUEUE_LABEL
from reconciler.service.clusters.base import RemoteSpec

_SERVER_METADATA = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "generation",
    "managedFields",
    "ownerReferences",
    "finalizers",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generateName",
)
# batch/v1 Job: the selector and these template labels are generated from the manager object's
# uid; sending them to another cluster fails validation (manualSelector is off).
_JOB_GENERATED_LABELS = (
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
    "job-name",
    "batch.kubernetes.io/job-name",
)


class PermanentFailure(ValueError):
    """The copy can never be created as asked (no manifest, unknown kind): report, do not retry."""


def _set_path(obj: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        nxt = obj.get(key)
        if not isinstance(nxt, dict):
            nxt = {}
            obj[key] = nxt
        obj = nxt
    if value is None:
        obj.pop(path[-1], None)
    else:
        obj[path[-1]] = value


def remote_manifest(spec: RemoteSpec, *, kind: KindInfo, manager_id: str, kueue: bool) -> dict[str, Any]:
    """The object to create on the worker for ``spec``."""
    if spec.manifest is None:
        raise PermanentFailure(f"no manifest was recorded for {spec.job.key}: cannot create a copy of it")
    body = copy.deepcopy(spec.manifest)
    body.pop("status", None)
    body["apiVersion"] = kind.api_version
    body["kind"] = kind.kind
    meta = body.setdefault("metadata", {})
    for key in _SERVER_METADATA:
        meta.pop(key, None)
    meta["name"] = spec.job.name
    meta["namespace"] = spec.job.namespace
    labels = dict(meta.get("labels") or {})
    labels.update({ORIGIN_LABEL: manager_id, JOB_UID_LABEL: spec.job.uid, ATTEMPT_LABEL: str(spec.attempt)})
    if not kueue:
        labels.pop(QUEUE_LABEL, None)
    meta["labels"] = labels
    if kind.managed_by_path is not None:
        _set_path(body, kind.managed_by_path, None)
    _release(body, kind=kind, kueue=kueue)
    if kind.group == "batch" and kind.kind == "Job":
        spec_ = body.get("spec") or {}
        spec_.pop("selector", None)
        tmeta = (spec_.get("template") or {}).get("metadata") or {}
        tlabels = tmeta.get("labels")
        if isinstance(tlabels, dict):
            for key in _JOB_GENERATED_LABELS:
                tlabels.pop(key, None)
    return body


def _release(body: dict[str, Any], *, kind: KindInfo, kueue: bool) -> None:
    """Undo the webhook's hold the way the kind needs it on the worker."""
    spec = body.get("spec")
    if kind.hold == "suspend":
        # With Kueue the copy stays suspended: the worker's Kueue admits and unsuspends it.
        _set_path(body, kind.suspend_path, kueue)
    elif kind.hold == "inactive":
        _set_path(body, kind.suspend_path, True)  # an active Workload: the worker's Kueue admits it
    elif kind.hold == "gate" and isinstance(spec, dict):
        # A plain Pod: without our gate (with Kueue, its pod webhook gates it again by the queue
        # label). ``priority`` is the manager's value of the class: the worker computes its own.
        gates = [g for g in spec.get("schedulingGates") or [] if g != {"name": POD_SCHEDULING_GATE}]
        if gates:
            spec["schedulingGates"] = gates
        else:
            spec.pop("schedulingGates", None)
        spec.pop("priority", None)
        spec.pop("nodeName", None)


class Origin(Struct, frozen=True):
    """Whose copy an object on a worker is."""

    job: ev.JobRef
    attempt: int
    remote_uid: str


def origin_of(obj: dict[str, Any], *, manager_id: str) -> Origin | None:
    """The (job, attempt) of one of our copies; None for objects that are not ours."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(ORIGIN_LABEL) != manager_id:
        return None
    uid = labels.get(JOB_UID_LABEL)
    try:
        attempt = int(labels.get(ATTEMPT_LABEL, ""))
    except ValueError:
        return None
    if not uid:
        return None
    api_version = str(obj.get("apiVersion") or "batch/v1")
    job = ev.JobRef(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(uid),
        api_version=api_version,
        kind=str(obj.get("kind") or "Job"),
    )
    return Origin(job=job, attempt=attempt, remote_uid=str(meta.get("uid", "")))


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    status = obj.get("status") or {}
    out: dict[str, dict[str, Any]] = {}
    for cond in status.get("conditions") or []:
        if isinstance(cond, dict) and cond.get("status") == "True":
            out[str(cond.get("type"))] = cond
    return out


_DONE_OK = ("Complete", "Completed", "Succeeded")
_DONE_FAILED = ("Failed",)
_PHASE_DONE = ("Succeeded", "Failed")


def _started(status: dict[str, Any]) -> bool:
    """Has the kind's own controller started it? (Without Kueue, that is the admission.)"""
    if status.get("startTime") or status.get("active") or status.get("phase") in ("Running", *_PHASE_DONE):
        return True  # Job, Kubeflow jobs, MPIJob, Pod
    replicated = status.get("replicatedJobsStatus")  # JobSet
    if isinstance(replicated, list) and any(
        isinstance(r, dict) and (r.get("active") or r.get("ready")) for r in replicated
    ):
        return True
    # RayJob, RayCluster
    return status.get("jobDeploymentStatus") in ("Running", "Complete") or status.get("state") == "ready"


def job_facts(obj: dict[str, Any], origin: Origin, *, cluster: str, kueue: bool) -> list[ev.InputEvent]:
    """Facts a copy's own object stands for: created; admitted (without Kueue: it started);
    finished (a terminal condition)."""
    job, attempt = origin.job, origin.attempt
    facts: list[ev.InputEvent] = [ev.RemoteCreated(job=job, cluster=cluster, attempt=attempt)]
    conds = _conditions(obj)
    status = obj.get("status") or {}
    if obj.get("kind") == "Workload":  # a Workload copy speaks for itself: its conditions
        facts += workload_facts(obj, origin, cluster=cluster)
        if "Finished" in conds:
            finished = conds["Finished"]
            ok = finished.get("reason") != "Failed"
            reason = "" if ok else str(finished.get("message") or "Failed")
            facts.append(
                ev.RemoteFinished(job=job, cluster=cluster, attempt=attempt, succeeded=ok, reason=reason)
            )
        return facts
    phase = status.get("phase")  # a plain Pod
    if not kueue and (_started(status) or bool(conds.keys() & set(_DONE_OK))):
        facts.append(ev.RemoteAdmitted(job=job, cluster=cluster, attempt=attempt))
    if phase in _PHASE_DONE:
        ok = phase == "Succeeded"
        reason = "" if ok else str(status.get("reason") or "Failed")
        facts.append(
            ev.RemoteFinished(job=job, cluster=cluster, attempt=attempt, succeeded=ok, reason=reason)
        )
        return facts
    for name in _DONE_OK:
        if name in conds:
            facts.append(ev.RemoteFinished(job=job, cluster=cluster, attempt=attempt, succeeded=True))
            return facts
    for name in _DONE_FAILED:
        if name in conds:
            reason = str(conds[name].get("reason") or "Failed")
            facts.append(
                ev.RemoteFinished(job=job, cluster=cluster, attempt=attempt, succeeded=False, reason=reason)
            )
    return facts


def workload_owner_uid(workload: dict[str, Any]) -> str | None:
    for ref in (workload.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("uid"):
            return str(ref["uid"])
    return None


def workload_facts(workload: dict[str, Any], origin: Origin, *, cluster: str) -> list[ev.InputEvent]:
    """Facts a Kueue Workload stands for: admitted (quota reserved and admitted), evicted."""
    job, attempt = origin.job, origin.attempt
    conds = _conditions(workload)
    facts: list[ev.InputEvent] = []
    if "Admitted" in conds:
        facts.append(ev.RemoteAdmitted(job=job, cluster=cluster, attempt=attempt))
    if "Evicted" in conds:
        reason = str(conds["Evicted"].get("reason") or "Evicted")
        facts.append(ev.RemoteEvicted(job=job, cluster=cluster, attempt=attempt, reason=reason))
    return facts


def age_ms(obj: dict[str, Any], *, now: datetime | None = None) -> int:
    """How long ago the object was created (0 when the server did not say)."""
    raw = (obj.get("metadata") or {}).get("creationTimestamp")
    if not isinstance(raw, str):
        return 0
    try:
        created = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return 0
    now = now or datetime.now(tz=UTC)
    return max(int((now - created).total_seconds() * 1000), 0)
