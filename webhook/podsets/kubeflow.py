"""Kubeflow: the training-operator kinds (replica specs by role) and TrainJob."""

from __future__ import annotations

from typing import Any

from webhook.podsets.common import PodSetError, PodSetSpec, int_at, obj_at, pod_spec

KUBEFLOW: dict[str, tuple[str, tuple[str, ...]]] = {
    "PyTorchJob": ("pytorchReplicaSpecs", ("master", "worker")),
    "TFJob": ("tfReplicaSpecs", ("chief", "master", "ps", "worker", "evaluator")),
    "XGBoostJob": ("xgbReplicaSpecs", ("master", "worker")),
    "PaddleJob": ("paddleReplicaSpecs", ("master", "worker")),
    "JAXJob": ("jaxReplicaSpecs", ("worker",)),
    "MPIJob": ("mpiReplicaSpecs", ("launcher", "worker")),
}


def kubeflow_sets(kind: str, spec: dict[str, Any], *, path: str) -> list[PodSetSpec]:
    field_name, order = KUBEFLOW[kind]
    replicas = obj_at(spec, field_name, path=path)
    by_lower = {str(k).lower(): k for k in replicas}
    out = []
    for role in order:
        key = by_lower.get(role)
        if key is None:
            continue
        rpath = f"{path}.{field_name}.{key}"
        rs = replicas[key]
        if not isinstance(rs, dict):
            raise PodSetError(f"expected an object, found {type(rs).__name__}", path=rpath)
        count = int_at(rs, "replicas", path=rpath, default=1)
        assert count is not None
        pspec, ppath = pod_spec(obj_at(rs, "template", path=rpath), f"{rpath}.template")
        out.append(PodSetSpec(name=role, count=count, spec=pspec, path=ppath))
    return out


def kubeflow(obj: dict[str, Any]) -> list[PodSetSpec]:
    return kubeflow_sets(str(obj.get("kind")), obj_at(obj, "spec", path="$"), path="$.spec")


def trainjob(obj: dict[str, Any]) -> list[PodSetSpec]:
    # The runtime's other replicated jobs (initializers) need API reads; only the trainer nodes
    # are counted. See docs/webhook.md.
    trainer = obj_at(obj_at(obj, "spec", path="$"), "trainer", path="$.spec")
    nodes = int_at(trainer, "numNodes", path="$.spec.trainer", default=1)
    assert nodes is not None
    node = {"name": "node", "resources": obj_at(trainer, "resourcesPerNode", path="$.spec.trainer")}
    return [PodSetSpec(name="node", count=nodes, spec={"containers": [node]}, path="$.spec.trainer")]


