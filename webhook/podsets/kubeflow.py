"""Kubeflow: the training-operator kinds (replica specs by role) and TrainJob."""

from __future__ import annotations

from typing import Any

from msgspec import Struct

from eventlog.kube.kinds import SUPPORTED_KINDS
from webhook.objects import Count, ObjectMeta, member
from webhook.podsets.common import (
    Container,
    PodSetSpec,
    PodSpec,
    PodTemplate,
    ResourceRequirements,
    decode,
    pod_spec,
    requests_of,
    template_annotations,
)

# Kind -> (the field of ``spec`` holding the replica specs, the roles that are pod sets in Kueue's
# order), read from the one kind table.
KUBEFLOW: dict[str, tuple[str, tuple[str, ...]]] = {
    k.kind: (k.replica_specs, k.roles) for k in SUPPORTED_KINDS if k.family == "kubeflow"
}


class ReplicaSpec(Struct, frozen=True, gc=False):
    replicas: Count | None = None
    template: PodTemplate | None = None


class Trainer(Struct, frozen=True, gc=False, rename="camel"):
    num_nodes: Count | None = None
    resources_per_node: ResourceRequirements | None = None


class TrainJobSpec(Struct, frozen=True, gc=False):
    trainer: Trainer | None = None


def kubeflow_sets(kind: str, raw: Any, *, path: str) -> list[PodSetSpec]:
    """``raw`` is the kind's spec. Its replica specs are a map keyed by role, each decoded under
    its own key, so that a message names the role as the user wrote it."""
    field_name, order = KUBEFLOW[kind]
    spec = decode(raw, dict[str, Any], path=path)
    replicas = decode(spec.get(field_name), dict[str, Any], path=f"{path}.{field_name}")
    by_lower = {k.lower(): k for k in replicas}
    out = []
    for role in order:
        key = by_lower.get(role)
        if key is None:
            continue
        rpath = member(f"{path}.{field_name}", key)
        rs = decode(replicas[key], ReplicaSpec, path=rpath)
        count = 1 if rs.replicas is None else rs.replicas
        out.append(
            PodSetSpec(
                name=role,
                count=count,
                spec=pod_spec(rs.template),
                path=f"{rpath}.template.spec",
                annotations=template_annotations(rs.template),
            )
        )
    return out


def kubeflow(raw: Any, meta: ObjectMeta, kind: str) -> list[PodSetSpec]:
    return kubeflow_sets(kind, raw, path="$.spec")


def trainjob(raw: Any, meta: ObjectMeta, kind: str) -> list[PodSetSpec]:
    # The runtime's other replicated jobs (initializers) need API reads; only the trainer nodes
    # are counted. See docs/webhook.md.
    trainer = decode(raw, TrainJobSpec, path="$.spec").trainer or Trainer()
    nodes = 1 if trainer.num_nodes is None else trainer.num_nodes
    # Read here for the path a bad quantity has in the object (not the made-up container's).
    requests_of(trainer.resources_per_node, "$.spec.trainer.resourcesPerNode")
    node = PodSpec(containers=[Container(resources=trainer.resources_per_node)])
    return [PodSetSpec(name="node", count=nodes, spec=node, path="$.spec.trainer")]
