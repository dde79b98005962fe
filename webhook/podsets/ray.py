"""KubeRay: RayCluster and RayJob, with the containers their operator adds (autoscaler, submitter)."""

from __future__ import annotations

from typing import Any

from webhook.podsets.common import (
    NotDispatchable,
    PodSetSpec,
    amounts,
    annotations_of,
    int_at,
    items,
    list_at,
    max_of,
    obj_at,
    pod_spec,
    requests_of,
    str_at,
)

_RAY_AUTOSCALER = {
    "requests": {"cpu": "500m", "memory": "512Mi"},
    "limits": {"cpu": "500m", "memory": "512Mi"},
}


_RAY_SUBMITTER = {
    "name": "ray-job-submitter",
    "resources": {"requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
}


_GCS_FT_MIN = {"cpu": "200m", "memory": "256Mi"}


def _with_container(pspec: dict[str, Any], container: dict[str, Any]) -> dict[str, Any]:
    containers = pspec.get("containers")
    return {**pspec, "containers": [*(containers if isinstance(containers, list) else []), container]}


def _ray_cluster_sets(
    rspec: dict[str, Any], path: str, *, ft_annotation: bool, head_extra: dict[str, Any] | None
) -> list[PodSetSpec]:
    head = obj_at(rspec, "headGroupSpec", path=path)
    hspec, hpath = pod_spec(
        obj_at(head, "template", path=f"{path}.headGroupSpec"), f"{path}.headGroupSpec.template"
    )
    if rspec.get("enableInTreeAutoscaling") is True:
        options = obj_at(rspec, "autoscalerOptions", path=path)
        resources = (
            options.get("resources") if isinstance(options.get("resources"), dict) else _RAY_AUTOSCALER
        )
        hspec = _with_container(hspec, {"name": "autoscaler", "resources": resources})
    if ft_annotation or rspec.get("gcsFaultToleranceOptions") is not None:
        hspec = _with_gcs_minimum(hspec, hpath)
    if head_extra is not None:
        hspec = _with_container(hspec, head_extra)
    out = [PodSetSpec(name="head", count=1, spec=hspec, path=hpath)]
    for wg, wpath in items(list_at(rspec, "workerGroupSpecs", path=path), f"{path}.workerGroupSpecs"):
        # The CRD defaults replicas to 0 before any webhook runs; a missing value means 0 here too.
        replicas = int_at(wg, "replicas", path=wpath, default=0)
        hosts = int_at(wg, "numOfHosts", path=wpath, default=1)
        assert replicas is not None and hosts is not None
        wspec, wspath = pod_spec(obj_at(wg, "template", path=wpath), f"{wpath}.template")
        out.append(
            PodSetSpec(
                name=str_at(wg, "groupName", path=wpath),
                count=replicas * max(hosts, 1),
                spec=wspec,
                path=wspath,
            )
        )
    return out


def _with_gcs_minimum(hspec: dict[str, Any], path: str) -> dict[str, Any]:
    containers = list_at(hspec, "containers", path=path)
    if not containers or not isinstance(containers[0], dict):
        return hspec
    first = containers[0]
    requests = requests_of(first, f"{path}.containers[0]")
    raised = max_of(requests, amounts(_GCS_FT_MIN, "$"))
    requests_out = {k: _nano_quantity(v) for k, v in raised.items()}
    resources = {**obj_at(first, "resources", path=f"{path}.containers[0]"), "requests": requests_out}
    return {**hspec, "containers": [{**first, "resources": resources}, *containers[1:]]}


def _nano_quantity(nanos: int) -> str:
    return f"{nanos}n"


def raycluster(obj: dict[str, Any]) -> list[PodSetSpec]:
    ft = annotations_of(obj).get("ray.io/ft-enabled") == "true"
    return _ray_cluster_sets(obj_at(obj, "spec", path="$"), "$.spec", ft_annotation=ft, head_extra=None)


def rayjob(obj: dict[str, Any]) -> list[PodSetSpec]:
    spec = obj_at(obj, "spec", path="$")
    if spec.get("rayClusterSpec") is None:
        raise NotDispatchable(
            "this RayJob has no spec.rayClusterSpec (it runs on an existing RayCluster through "
            "spec.clusterSelector), so kdispatch cannot dispatch it to another cluster; it was left alone"
        )
    mode = str_at(spec, "submissionMode", path="$.spec", default="K8sJobMode")
    rspec = obj_at(spec, "rayClusterSpec", path="$.spec")
    sets = _ray_cluster_sets(
        rspec,
        "$.spec.rayClusterSpec",
        ft_annotation=False,
        head_extra=_RAY_SUBMITTER if mode == "SidecarMode" else None,
    )
    if mode == "K8sJobMode":
        submitter = spec.get("submitterPodTemplate")
        if isinstance(submitter, dict):
            sspec, spath = pod_spec(submitter, "$.spec.submitterPodTemplate")
        else:
            sspec, spath = {"containers": [_RAY_SUBMITTER]}, "$.spec.submitterPodTemplate"
        sets.append(PodSetSpec(name="submitter", count=1, spec=sspec, path=spath))
    return sets


