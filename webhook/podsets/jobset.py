"""JobSet: one pod set per replicated job."""

from __future__ import annotations

from typing import Any

from webhook.podsets.common import PodSetSpec, int_at, items, list_at, obj_at, pod_spec, str_at


def jobset_sets(spec: dict[str, Any], path: str) -> list[PodSetSpec]:
    out = []
    for rj, rpath in items(list_at(spec, "replicatedJobs", path=path), f"{path}.replicatedJobs"):
        replicas = int_at(rj, "replicas", path=rpath, default=1)
        jtemplate = obj_at(rj, "template", path=rpath)
        jspec = obj_at(jtemplate, "spec", path=f"{rpath}.template")
        jpath = f"{rpath}.template.spec"
        parallelism = int_at(jspec, "parallelism", path=jpath, default=1)
        completions = int_at(jspec, "completions", path=jpath, default=parallelism)
        assert replicas is not None and parallelism is not None and completions is not None
        pspec, ppath = pod_spec(obj_at(jspec, "template", path=jpath), f"{jpath}.template")
        out.append(
            PodSetSpec(
                name=str_at(rj, "name", path=rpath),
                count=replicas * min(parallelism, completions),
                spec=pspec,
                path=ppath,
            )
        )
    return out


def jobset(obj: dict[str, Any]) -> list[PodSetSpec]:
    return jobset_sets(obj_at(obj, "spec", path="$"), "$.spec")


