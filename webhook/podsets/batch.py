"""Built-in and Kueue kinds: Job, Pod (and Kueue pod groups), Workload."""

from __future__ import annotations

from typing import Any

from msgspec import Struct

from eventlog.kube.names import MIN_PARALLELISM_ANNOTATION, POD_GROUP_NAME, POD_GROUP_TOTAL
from webhook.objects import Count, ObjectMeta, member
from webhook.podsets.common import (
    PodSetError,
    PodSetSpec,
    PodSpec,
    PodTemplate,
    decode,
    pod_spec,
    template_annotations,
)
from webhook.quote import short


class JobSpec(Struct, frozen=True, gc=False):
    parallelism: Count | None = None
    completions: Count | None = None
    template: PodTemplate | None = None

    @property
    def count(self) -> int:
        parallelism = 1 if self.parallelism is None else self.parallelism
        return parallelism if self.completions is None else min(parallelism, self.completions)


class WorkloadPodSet(Struct, frozen=True, gc=False, rename="camel"):
    name: str | None = None
    count: Count | None = None
    min_count: Count | None = None
    template: PodTemplate | None = None


class WorkloadSpec(Struct, frozen=True, gc=False, rename="camel"):
    pod_sets: list[WorkloadPodSet] | None = None


def _positive(meta: ObjectMeta, annotation: str) -> int | None:
    raw = meta.annotation_map.get(annotation)
    if raw is None:
        return None
    if not raw.isascii() or not raw.isdigit() or int(raw) < 1:
        raise PodSetError(f"expected a positive integer, found {short(raw)}", path=member("$.metadata.annotations", annotation))
    return int(raw)


def batch_job(raw: Any, meta: ObjectMeta, kind: str) -> list[PodSetSpec]:
    spec = decode(raw, JobSpec, path="$.spec")
    return [
        PodSetSpec(
            name="main",
            count=spec.count,
            spec=pod_spec(spec.template),
            path="$.spec.template.spec",
            annotations=template_annotations(spec.template),
            min_count=_positive(meta, MIN_PARALLELISM_ANNOTATION),
        )
    ]


def pod(raw: Any, meta: ObjectMeta, kind: str) -> list[PodSetSpec]:
    spec = decode(raw, PodSpec, path="$.spec")
    count = (_positive(meta, POD_GROUP_TOTAL) or 1) if pod_group_name(meta) else 1
    return [PodSetSpec(name="main", count=count, spec=spec, path="$.spec", annotations=meta.annotation_map)]


def pod_group_name(meta: ObjectMeta) -> str:
    """The Kueue pod group (annotation first, then label), or ''."""
    for values in (meta.annotations, meta.labels):
        if values and POD_GROUP_NAME in values:
            return values[POD_GROUP_NAME]
    return ""


def workload(raw: Any, meta: ObjectMeta, kind: str) -> list[PodSetSpec]:
    spec = decode(raw, WorkloadSpec, path="$.spec")
    return [
        PodSetSpec(
            name="main" if ps.name is None else ps.name,
            count=1 if ps.count is None else ps.count,
            spec=pod_spec(ps.template),
            path=f"$.spec.podSets[{i}].template.spec",
            annotations=template_annotations(ps.template),
            min_count=ps.min_count,
        )
        for i, ps in enumerate(spec.pod_sets or ())
    ]
