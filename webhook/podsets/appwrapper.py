"""AppWrapper: pod sets declared by path in each component, or inferred from the component's kind."""

from __future__ import annotations

from typing import Any

from webhook.podsets.batch import job_count
from webhook.podsets.common import PodSetError, PodSetSpec, int_at, items, list_at, obj_at, pod_spec, str_at
from webhook.podsets.jobset import jobset_sets
from webhook.podsets.kubeflow import kubeflow_sets
from webhook.quote import short


def _resolve(component: dict[str, Any], dotted: str, *, path: str) -> dict[str, Any]:
    """An AppWrapper ``podSets[].path`` such as ``template.spec.replicatedJobs[0].template``."""
    node: Any = component
    here = path
    for part in dotted.split("."):
        name, _, index = part.partition("[")
        if not isinstance(node, dict) or not isinstance(node.get(name), (dict, list)):
            raise PodSetError(f"path {short(dotted)} does not resolve at {short(name)}", path=path)
        node = node[name]
        here = f"{here}.{name}"
        if index:
            idx = index.rstrip("]")
            if not idx.isdigit() or not isinstance(node, list) or int(idx) >= len(node):
                raise PodSetError(f"path {short(dotted)}: bad index {short(idx)}", path=path)
            node = node[int(idx)]
    if not isinstance(node, dict):
        raise PodSetError(f"path {short(dotted)} is not an object", path=path)
    return node


def _appwrapper_inferred(template: dict[str, Any], path: str) -> list[tuple[int, dict[str, Any], str]]:
    kind = template.get("kind")
    spec = obj_at(template, "spec", path=path)
    spath = f"{path}.spec"
    if kind == "Job":
        pspec, ppath = pod_spec(obj_at(spec, "template", path=spath), f"{spath}.template")
        return [(job_count(spec, spath), pspec, ppath)]
    if kind == "JobSet":
        return [(s.count, s.spec, s.path) for s in jobset_sets(spec, spath)]
    if kind in ("PyTorchJob",):
        return [(s.count, s.spec, s.path) for s in kubeflow_sets(kind, spec, path=spath)]
    if kind in ("RayCluster", "RayJob"):
        rspec = spec if kind == "RayCluster" else obj_at(spec, "rayClusterSpec", path=spath)
        rpath = spath if kind == "RayCluster" else f"{spath}.rayClusterSpec"
        head, hpath = pod_spec(
            obj_at(obj_at(rspec, "headGroupSpec", path=rpath), "template", path=f"{rpath}.headGroupSpec"),
            f"{rpath}.headGroupSpec.template",
        )
        out = [(1, head, hpath)]
        for wg, wpath in items(list_at(rspec, "workerGroupSpecs", path=rpath), f"{rpath}.workerGroupSpecs"):
            replicas = int_at(
                wg, "replicas", path=wpath, default=1
            )  # AppWrapper reads replicas only (no numOfHosts)
            assert replicas is not None
            wspec, wspath = pod_spec(obj_at(wg, "template", path=wpath), f"{wpath}.template")
            out.append((replicas, wspec, wspath))
        return out
    if kind == "Pod":
        return [(1, spec, spath)]
    if kind in ("Deployment", "StatefulSet"):
        replicas = int_at(spec, "replicas", path=spath, default=1)
        assert replicas is not None
        pspec, ppath = pod_spec(obj_at(spec, "template", path=spath), f"{spath}.template")
        return [(replicas, pspec, ppath)]
    return []


def appwrapper(obj: dict[str, Any]) -> list[PodSetSpec]:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    base = str(meta.get("name") or meta.get("generateName") or "appwrapper")
    out: list[PodSetSpec] = []
    for comp, cpath in items(
        list_at(obj_at(obj, "spec", path="$"), "components", path="$.spec"), "$.spec.components"
    ):
        declared = list_at(comp, "podSets", path=cpath)
        if declared:
            found = []
            for ps, ppath in items(declared, f"{cpath}.podSets"):
                replicas = int_at(ps, "replicas", path=ppath, default=1)
                assert replicas is not None
                template = _resolve(comp, str_at(ps, "path", path=ppath), path=f"{ppath}.path")
                pspec, spath = pod_spec(template, f"{cpath}.{str_at(ps, 'path', path=ppath)}")
                found.append((replicas, pspec, spath))
        else:
            found = _appwrapper_inferred(obj_at(comp, "template", path=cpath), f"{cpath}.template")
        for count, pspec, spath in found:
            # AppWrapper rebuilds templates without restartPolicy or pod-level resources.
            out.append(
                PodSetSpec(
                    name=f"{base}-{len(out)}",
                    count=count,
                    spec=pspec,
                    path=spath,
                    sidecars=False,
                    pod_level=False,
                )
            )
    return out


