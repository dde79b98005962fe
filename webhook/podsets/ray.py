"""KubeRay: RayCluster and RayJob, with the containers their operator adds (autoscaler, submitter)."""

from __future__ import annotations

from typing import Any

from msgspec import Struct, structs

from webhook.objects import Count, ObjectMeta
from webhook.podsets.common import (
    Container,
    NotDispatchable,
    PodSetSpec,
    PodSpec,
    PodTemplate,
    ResourceRequirements,
    amounts,
    decode,
    max_of,
    pod_spec,
    requests_of,
    template_annotations,
)


class AutoscalerOptions(Struct, frozen=True, gc=False):
    resources: ResourceRequirements | None = None


class HeadGroupSpec(Struct, frozen=True, gc=False):
    template: PodTemplate | None = None


class WorkerGroupSpec(Struct, frozen=True, gc=False, rename="camel"):
    group_name: str | None = None
    replicas: Count | None = None
    num_of_hosts: Count | None = None
    template: PodTemplate | None = None


class RayClusterSpec(Struct, frozen=True, gc=False, rename="camel"):
    head_group_spec: HeadGroupSpec | None = None
    worker_group_specs: list[WorkerGroupSpec] | None = None
    enable_in_tree_autoscaling: bool | None = None
    autoscaler_options: AutoscalerOptions | None = None
    gcs_fault_tolerance_options: dict[str, Any] | None = None  # only its presence matters


class RayJobSpec(Struct, frozen=True, gc=False, rename="camel"):
    ray_cluster_spec: RayClusterSpec | None = None
    submission_mode: str | None = None
    submitter_pod_template: PodTemplate | None = None


_RAY_AUTOSCALER = ResourceRequirements(
    requests={"cpu": "500m", "memory": "512Mi"},
    limits={"cpu": "500m", "memory": "512Mi"},
)
_RAY_SUBMITTER = Container(
    resources=ResourceRequirements(requests={"cpu": "500m", "memory": "200Mi"}, limits={"cpu": "1", "memory": "1Gi"})
)
_GCS_FT_MIN = amounts({"cpu": "200m", "memory": "256Mi"}, "$")


def _with_container(pspec: PodSpec, container: Container) -> PodSpec:
    return structs.replace(pspec, containers=[*(pspec.containers or ()), container])


def head_template(rspec: RayClusterSpec) -> PodTemplate | None:
    return rspec.head_group_spec.template if rspec.head_group_spec is not None else None


def ray_cluster_sets(rspec: RayClusterSpec, path: str, *, ft_annotation: bool, head_extra: Container | None) -> list[PodSetSpec]:
    hspec = pod_spec(head_template(rspec))
    hpath = f"{path}.headGroupSpec.template.spec"
    if rspec.enable_in_tree_autoscaling is True:
        options = rspec.autoscaler_options or AutoscalerOptions()
        resources = options.resources if options.resources is not None else _RAY_AUTOSCALER
        hspec = _with_container(hspec, Container(resources=resources))
    if ft_annotation or rspec.gcs_fault_tolerance_options is not None:
        hspec = _with_gcs_minimum(hspec, hpath)
    if head_extra is not None:
        hspec = _with_container(hspec, head_extra)
    head = PodSetSpec(name="head", count=1, spec=hspec, path=hpath, annotations=template_annotations(head_template(rspec)))
    out = [head]
    for i, wg in enumerate(rspec.worker_group_specs or ()):
        # The CRD defaults replicas to 0 before any webhook runs; a missing value means 0 here too.
        replicas = wg.replicas or 0
        hosts = 1 if wg.num_of_hosts is None else wg.num_of_hosts
        out.append(
            PodSetSpec(
                name=wg.group_name or "",
                count=replicas * max(hosts, 1),
                spec=pod_spec(wg.template),
                path=f"{path}.workerGroupSpecs[{i}].template.spec",
                annotations=template_annotations(wg.template),
            )
        )
    return out


def _with_gcs_minimum(hspec: PodSpec, path: str) -> PodSpec:
    if not hspec.containers:
        return hspec
    first, *rest = hspec.containers
    raised = max_of(requests_of(first.resources, f"{path}.containers[0].resources"), _GCS_FT_MIN)
    resources = ResourceRequirements(
        requests={k: f"{v}n" for k, v in raised.items()},
        limits=first.resources.limits if first.resources is not None else None,
    )
    return structs.replace(hspec, containers=[structs.replace(first, resources=resources), *rest])


def raycluster(raw: Any, meta: ObjectMeta, kind: str) -> list[PodSetSpec]:
    ft = meta.annotation_map.get("ray.io/ft-enabled") == "true"
    return ray_cluster_sets(decode(raw, RayClusterSpec, path="$.spec"), "$.spec", ft_annotation=ft, head_extra=None)


def rayjob(raw: Any, meta: ObjectMeta, kind: str) -> list[PodSetSpec]:
    spec = decode(raw, RayJobSpec, path="$.spec")
    if spec.ray_cluster_spec is None:
        raise NotDispatchable(
            "this RayJob has no spec.rayClusterSpec (it runs on an existing RayCluster through "
            "spec.clusterSelector), so kdispatch cannot dispatch it to another cluster; it was left alone"
        )
    mode = "K8sJobMode" if spec.submission_mode is None else spec.submission_mode
    sets = ray_cluster_sets(
        spec.ray_cluster_spec,
        "$.spec.rayClusterSpec",
        ft_annotation=False,
        head_extra=_RAY_SUBMITTER if mode == "SidecarMode" else None,
    )
    if mode == "K8sJobMode":
        if spec.submitter_pod_template is not None:
            sspec, spath = pod_spec(spec.submitter_pod_template), "$.spec.submitterPodTemplate.spec"
        else:
            sspec, spath = PodSpec(containers=[_RAY_SUBMITTER]), "$.spec.submitterPodTemplate"
        annotations = template_annotations(spec.submitter_pod_template)
        sets.append(PodSetSpec(name="submitter", count=1, spec=sspec, path=spath, annotations=annotations))
    return sets
