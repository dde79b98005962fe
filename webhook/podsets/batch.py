"""Built-in and Kueue kinds: Job, Pod (and Kueue pod groups), Workload."""

from __future__ import annotations

from typing import Any

from webhook.podsets.common import (
    PodSetError,
    PodSetSpec,
    annotations_of,
    int_at,
    items,
    list_at,
    obj_at,
    pod_spec,
    str_at,
)
from webhook.quote import short

MIN_PARALLELISM_ANNOTATION = "kueue.x-k8s.io/job-min-parallelism"


POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"


POD_GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"


def job_count(jspec: dict[str, Any], path: str) -> int:
    parallelism = int_at(jspec, "parallelism", path=path, default=1)
    completions = int_at(jspec, "completions", path=path, default=None)
    assert parallelism is not None
    return min(parallelism, completions) if completions is not None else parallelism


def _min_parallelism(obj: dict[str, Any]) -> int | None:
    raw = annotations_of(obj).get(MIN_PARALLELISM_ANNOTATION)
    if raw is None:
        return None
    path = f"$.metadata.annotations[{MIN_PARALLELISM_ANNOTATION!r}]"
    if not isinstance(raw, str) or not raw.isascii() or not raw.isdigit() or int(raw) < 1:
        raise PodSetError(f"expected a positive integer, found {short(raw)}", path=path)
    return int(raw)


def batch_job(obj: dict[str, Any]) -> list[PodSetSpec]:
    spec = obj_at(obj, "spec", path="$")
    template = obj_at(spec, "template", path="$.spec")
    pspec, ppath = pod_spec(template, "$.spec.template")
    return [
        PodSetSpec(
            name="main",
            count=job_count(spec, "$.spec"),
            spec=pspec,
            path=ppath,
            min_count=_min_parallelism(obj),
        )
    ]


def pod(obj: dict[str, Any]) -> list[PodSetSpec]:
    spec = obj_at(obj, "spec", path="$")
    count = 1
    total = annotations_of(obj).get(POD_GROUP_TOTAL)
    if pod_group_name(obj) and total is not None:
        path = f"$.metadata.annotations[{POD_GROUP_TOTAL!r}]"
        if not isinstance(total, str) or not total.isascii() or not total.isdigit() or int(total) < 1:
            raise PodSetError(f"expected a positive integer, found {short(total)}", path=path)
        count = int(total)
    return [PodSetSpec(name="main", count=count, spec=spec, path="$.spec")]


def pod_group_name(obj: dict[str, Any]) -> str:
    """The Kueue pod group (annotation first, then label), or ''."""
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    for where in ("annotations", "labels"):
        values = meta.get(where)
        if isinstance(values, dict) and isinstance(values.get(POD_GROUP_NAME), str):
            return str(values[POD_GROUP_NAME])
    return ""


def workload(obj: dict[str, Any]) -> list[PodSetSpec]:
    out = []
    for ps, path in items(list_at(obj_at(obj, "spec", path="$"), "podSets", path="$.spec"), "$.spec.podSets"):
        count = int_at(ps, "count", path=path, default=1)
        assert count is not None
        pspec, ppath = pod_spec(obj_at(ps, "template", path=path), f"{path}.template")
        out.append(
            PodSetSpec(
                name=str_at(ps, "name", path=path, default="main"),
                count=count,
                spec=pspec,
                path=ppath,
                min_count=int_at(ps, "minCount", path=path, default=None),
            )
        )
    return out


