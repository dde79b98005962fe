"""AppWrapper: pod sets declared by path in each component, or inferred from the component's kind.

A component's template is any object; only the kinds AppWrapper itself infers pod sets for are
decoded, each into its own family's Structs.
"""

from __future__ import annotations

from typing import Any

from msgspec import Struct

from webhook.objects import Count, ObjectMeta
from webhook.podsets.batch import JobSpec
from webhook.podsets.common import PodSetError, PodSetSpec, PodSpec, PodTemplate, decode, pod_spec
from webhook.podsets.jobset import JobSetSpec, jobset_sets
from webhook.podsets.kubeflow import kubeflow_sets
from webhook.podsets.ray import RayClusterSpec, RayJobSpec, head_template
from webhook.quote import short


class DeclaredPodSet(Struct, frozen=True, gc=False):
    replicas: Count | None = None
    path: str | None = None


class Component(Struct, frozen=True, gc=False, rename="camel"):
    pod_sets: list[DeclaredPodSet] | None = None
    template: dict[str, Any] | None = None


class AppWrapperSpec(Struct, frozen=True, gc=False):
    components: list[dict[str, Any]] | None = None  # each also read by path (``podSets[].path``)


class _Template(Struct, frozen=True, gc=False):
    kind: str | None = None
    spec: Any = None


class _ReplicatedSpec(Struct, frozen=True, gc=False):
    """Deployment, StatefulSet."""

    replicas: Count | None = None
    template: PodTemplate | None = None


def _resolve(component: dict[str, Any], dotted: str, *, path: str) -> dict[str, Any]:
    """An AppWrapper ``podSets[].path`` such as ``template.spec.replicatedJobs[0].template``."""
    node: Any = component
    for part in dotted.split("."):
        name, _, index = part.partition("[")
        if not isinstance(node, dict) or not isinstance(node.get(name), (dict, list)):
            raise PodSetError(f"path {short(dotted)} does not resolve at {short(name)}", path=path)
        node = node[name]
        if index:
            idx = index.rstrip("]")
            if not idx.isdigit() or not isinstance(node, list) or int(idx) >= len(node):
                raise PodSetError(f"path {short(dotted)}: bad index {short(idx)}", path=path)
            node = node[int(idx)]
    if not isinstance(node, dict):
        raise PodSetError(f"path {short(dotted)} is not an object", path=path)
    return node


def _inferred(raw: dict[str, Any] | None, path: str) -> list[tuple[int, PodSpec, str]]:
    template = decode(raw, _Template, path=path)
    kind = template.kind
    spath = f"{path}.spec"
    if kind == "Job":
        job = decode(template.spec, JobSpec, path=spath)
        return [(job.count, pod_spec(job.template), f"{spath}.template.spec")]
    if kind == "JobSet":
        return [(s.count, s.spec, s.path) for s in jobset_sets(decode(template.spec, JobSetSpec, path=spath), spath)]
    if kind == "PyTorchJob":
        return [(s.count, s.spec, s.path) for s in kubeflow_sets(kind, template.spec, path=spath)]
    if kind in ("RayCluster", "RayJob"):
        if kind == "RayCluster":
            rspec, rpath = decode(template.spec, RayClusterSpec, path=spath), spath
        else:
            rspec = decode(template.spec, RayJobSpec, path=spath).ray_cluster_spec or RayClusterSpec()
            rpath = f"{spath}.rayClusterSpec"
        out = [(1, pod_spec(head_template(rspec)), f"{rpath}.headGroupSpec.template.spec")]
        for i, wg in enumerate(rspec.worker_group_specs or ()):
            replicas = 1 if wg.replicas is None else wg.replicas  # AppWrapper reads replicas only (no numOfHosts)
            out.append((replicas, pod_spec(wg.template), f"{rpath}.workerGroupSpecs[{i}].template.spec"))
        return out
    if kind == "Pod":
        return [(1, decode(template.spec, PodSpec, path=spath), spath)]
    if kind in ("Deployment", "StatefulSet"):
        spec = decode(template.spec, _ReplicatedSpec, path=spath)
        return [(1 if spec.replicas is None else spec.replicas, pod_spec(spec.template), f"{spath}.template.spec")]
    return []


def appwrapper(raw: Any, meta: ObjectMeta, kind: str) -> list[PodSetSpec]:
    base = meta.name or meta.generate_name or "appwrapper"
    out: list[PodSetSpec] = []
    for c, comp in enumerate(decode(raw, AppWrapperSpec, path="$.spec").components or ()):
        cpath = f"$.spec.components[{c}]"
        component = decode(comp, Component, path=cpath)
        if component.pod_sets:
            found = []
            for i, ps in enumerate(component.pod_sets):
                dotted = ps.path or ""
                template = _resolve(comp, dotted, path=f"{cpath}.podSets[{i}].path")
                tpath = f"{cpath}.{dotted}"
                spec = pod_spec(decode(template, PodTemplate, path=tpath))
                found.append((1 if ps.replicas is None else ps.replicas, spec, f"{tpath}.spec"))
        else:
            found = _inferred(component.template, f"{cpath}.template")
        for count, pspec, spath in found:
            # AppWrapper rebuilds templates without restartPolicy or pod-level resources.
            out.append(
                PodSetSpec(name=f"{base}-{len(out)}", count=count, spec=pspec, path=spath, sidecars=False, pod_level=False)
            )
    return out
