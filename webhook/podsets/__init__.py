"""Pod sets of each supported kind, and the per-pod request rule (KINDS.md, "Per-pod request rule").

One module per family of kinds (batch, jobset, kubeflow, ray, appwrapper), each with the Structs
its kinds' specs are decoded into; ``common`` holds the pod template and the request rule they
share. This module is the entry point: ``extract`` and ``pod_sets``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from eventlog import events as ev
from eventlog.kube.kinds import KindInfo
from webhook.objects import ObjectError, ObjectMeta, metadata
from webhook.podsets import constraints
from webhook.podsets.appwrapper import appwrapper
from webhook.podsets.batch import (
    MIN_PARALLELISM_ANNOTATION,
    POD_GROUP_NAME,
    POD_GROUP_TOTAL,
    batch_job,
    pod,
    pod_group_name,
    workload,
)
from webhook.podsets.common import (
    Amounts,
    NotDispatchable,
    PodSetError,
    PodSetSpec,
    pod_requests,
    to_integers,
)
from webhook.podsets.jobset import jobset
from webhook.podsets.kubeflow import KUBEFLOW, kubeflow, trainjob
from webhook.podsets.ray import raycluster, rayjob
from webhook.quote import short

__all__ = [
    "MIN_PARALLELISM_ANNOTATION",
    "POD_GROUP_NAME",
    "POD_GROUP_TOTAL",
    "Amounts",
    "NotDispatchable",
    "PodSetError",
    "PodSetSpec",
    "extract",
    "pod_group_name",
    "pod_requests",
    "pod_sets",
    "to_integers",
    "to_pod_sets",
]

Extractor = Callable[[Any, ObjectMeta, str], list[PodSetSpec]]
"""(the object's ``spec`` as sent, its metadata, its kind) -> its pod sets."""

_EXTRACTORS: dict[str, Extractor] = {
    "Job": batch_job,
    "JobSet": jobset,
    "RayCluster": raycluster,
    "RayJob": rayjob,
    "TrainJob": trainjob,
    "AppWrapper": appwrapper,
    "Pod": pod,
    "Workload": workload,
    **{kind: kubeflow for kind in KUBEFLOW},
}


def extract(info: KindInfo, obj: dict[str, Any], *, meta: ObjectMeta | None = None) -> list[PodSetSpec]:
    """The pod sets of ``obj`` (a ``info.kind``), in the kind's fixed order; names are unique, as
    the dispatcher and the workers' quota refer to sets by name (a Ray worker group may not be
    called ``head``). ``meta`` is ``obj``'s metadata when the caller has decoded it already.
    Raises ``PodSetError`` (with the JSON path) or ``NotDispatchable``."""
    if meta is None:
        try:
            meta = metadata(obj)
        except ObjectError as err:
            raise PodSetError(err.message, path=err.path) from None
    sets = constraints.with_groups(_EXTRACTORS[info.kind](obj.get("spec"), meta, info.kind), meta)
    seen: dict[str, PodSetSpec] = {}
    for s in sets:
        if s.name in seen:
            raise PodSetError(f"pod set name {short(s.name)} is used twice (also at {seen[s.name].path})", path=s.path)
        seen[s.name] = s
    return sets


def pod_sets(info: KindInfo, obj: dict[str, Any]) -> list[ev.PodSet]:
    return to_pod_sets(extract(info, obj))


def to_pod_sets(specs: Iterable[PodSetSpec]) -> list[ev.PodSet]:
    out = []
    for s in specs:
        requests = pod_requests(s.spec, path=s.path, sidecars=s.sidecars, pod_level=s.pod_level)
        out.append(
            ev.PodSet(
                name=s.name,
                count=s.count,
                requests=to_integers(requests),
                min_count=s.min_count,
                node_selector=constraints.node_selector(s.spec),
                node_affinity=constraints.node_affinity(s.spec),
                tolerations=constraints.tolerations(s.spec),
                topology=constraints.topology(s),
                group=s.group,
            )
        )
    return out


