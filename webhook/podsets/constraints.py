"""What a pod set asks of the nodes it lands on, and the gang it belongs to (docs/capacity-reports.md).

From each pod template: ``nodeSelector``, the required node affinity (an OR of terms, each an AND
of expressions), ``tolerations``, and Kueue's topology annotations
(``kueue.x-k8s.io/podset-required-topology`` / ``podset-preferred-topology``: a node label naming
a topology level).

Gangs as the Kubernetes Workload API defines them (``scheduling.k8s.io/v1alpha2``: a Workload
with ``podGroupTemplates[]``, each ``{name, schedulingPolicy: {gang: {minCount}} | {basic: {}}}``).
The webhook reads no other object than the one under review, so the job carries what it needs:

- which pod group a pod set is: its template's ``spec.schedulingGroup.podGroupName`` (Kubernetes
  1.36) or ``spec.workloadRef.podGroup`` (1.35);
- the Workload itself, as the user would ``kubectl apply`` it, in the job's annotation
  ``kdispatch.io/workload`` (JSON). Its templates are matched to pod sets by the group name the
  pod template gives (a PodGroup object named ``<workload>-<template>`` counts too), else by the
  names KubeRay's workload-aware scheduling gives them (``head``; ``worker-<groupName>``) or the
  pod set's own name. A gang template's ``minCount`` becomes the pod set's ``min_count``.
"""

from __future__ import annotations

import json
from typing import Any

from msgspec import Struct, structs

from eventlog import events as ev
from eventlog.kube.names import WORKLOAD_ANNOTATION
from webhook.objects import ObjectMeta, convert, member
from webhook.podsets.common import PodSetError, PodSetSpec, PodSpec
from webhook.quote import short

REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
WORKLOAD_API_VERSIONS = ("scheduling.k8s.io/v1alpha2", "scheduling.k8s.io/v1alpha1")


def node_selector(spec: PodSpec) -> dict[str, str]:
    return dict(sorted(spec.node_selector.items())) if spec.node_selector else {}


def node_affinity(spec: PodSpec) -> list[ev.SelectorTerm]:
    """The required node affinity, an OR of terms. ``matchFields`` (node names) are left out:
    capacity facts do not name nodes."""
    na = spec.affinity.node_affinity if spec.affinity is not None else None
    required = na.required_during_scheduling_ignored_during_execution if na is not None else None
    if required is None:
        return []
    return [
        ev.SelectorTerm(
            match_expressions=[
                ev.MatchExpression(key=e.key, operator=e.operator, values=list(e.values or ()))
                for e in term.match_expressions or ()
            ]
        )
        for term in required.node_selector_terms or ()
    ]


def tolerations(spec: PodSpec) -> list[ev.Toleration]:
    out: list[ev.Toleration] = []
    for t in spec.tolerations or ():
        operator = t.operator or "Equal"  # the API default
        out.append(
            ev.Toleration(
                key=t.key or "",
                operator=operator,
                value=t.value or "",
                effect=t.effect or "",
                toleration_seconds=t.toleration_seconds,
            )
        )
    return out


def topology(s: PodSetSpec) -> ev.TopologyRequest | None:
    required = s.annotations.get(REQUIRED_TOPOLOGY) or None
    preferred = s.annotations.get(PREFERRED_TOPOLOGY) or None
    if required is None and preferred is None:
        return None
    return ev.TopologyRequest(required=required, preferred=preferred)


# ---- the Workload API -------------------------------------------------------------------------


class GangPolicy(Struct, frozen=True, gc=False, rename="camel"):
    min_count: int | None = None


class SchedulingPolicy(Struct, frozen=True, gc=False):
    basic: dict[str, Any] | None = None
    gang: GangPolicy | None = None


class PodGroupTemplate(Struct, frozen=True, gc=False, rename="camel"):
    name: str
    scheduling_policy: SchedulingPolicy | None = None
    policy: SchedulingPolicy | None = None  # v1alpha1 (``podGroups[].policy``)


class WorkloadSpec(Struct, frozen=True, gc=False, rename="camel"):
    pod_group_templates: list[PodGroupTemplate] | None = None
    pod_groups: list[PodGroupTemplate] | None = None  # v1alpha1


class WorkloadMeta(Struct, frozen=True, gc=False):
    name: str | None = None


class Workload(Struct, frozen=True, gc=False, rename="camel"):
    api_version: str | None = None
    kind: str | None = None
    metadata: WorkloadMeta | None = None
    spec: WorkloadSpec | None = None


def _min_counts(meta: ObjectMeta) -> tuple[str, dict[str, int | None]] | None:
    """(workload name, template name -> gang minCount or None) from the job's annotation."""
    raw = meta.annotation_map.get(WORKLOAD_ANNOTATION)
    if raw is None:
        return None
    path = member("$.metadata.annotations", WORKLOAD_ANNOTATION)
    try:
        decoded = json.loads(raw)
    except ValueError as err:
        raise PodSetError(f"expected a Workload ({WORKLOAD_API_VERSIONS[0]}) as JSON: {err}", path=path) from None
    workload = convert(decoded, Workload, path=path, error=PodSetError)
    if workload.kind != "Workload" or workload.api_version not in WORKLOAD_API_VERSIONS:
        raise PodSetError(
            f"expected kind Workload of {' or '.join(WORKLOAD_API_VERSIONS)}, "
            f"found {short(workload.kind)} of {short(workload.api_version)}",
            path=path,
        )
    spec = workload.spec or WorkloadSpec()
    out: dict[str, int | None] = {}
    for t in spec.pod_group_templates or spec.pod_groups or ():
        policy = t.scheduling_policy or t.policy
        out[t.name] = policy.gang.min_count if policy is not None and policy.gang is not None else None
    name = workload.metadata.name if workload.metadata is not None and workload.metadata.name else ""
    return name, out


def _reference(spec: PodSpec) -> str | None:
    if spec.scheduling_group is not None and spec.scheduling_group.pod_group_name:
        return spec.scheduling_group.pod_group_name
    if spec.workload_ref is not None and spec.workload_ref.pod_group:
        return spec.workload_ref.pod_group
    return None


def _template_for(s: PodSetSpec, ref: str | None, workload: str, templates: dict[str, int | None]) -> str | None:
    if ref is not None:
        if ref in templates:
            return ref
        # A PodGroup object's name: controllers name it after the Workload (or the job) and the template.
        return next((t for t in templates if ref == f"{workload}-{t}" or ref.endswith(f"-{t}")), None)
    for candidate in (s.name, f"worker-{s.name}"):  # KubeRay names templates head, worker-<group>
        if candidate in templates:
            return candidate
    return None


def with_groups(specs: list[PodSetSpec], meta: ObjectMeta) -> list[PodSetSpec]:
    """``specs`` with ``group`` and ``min_count`` from the Workload API, where the job has them."""
    found = _min_counts(meta)
    workload, templates = found if found is not None else ("", {})
    out = []
    for s in specs:
        ref = _reference(s.spec)
        template = _template_for(s, ref, workload, templates) if templates else None
        group = template or ref
        min_count = s.min_count
        if template is not None and templates[template] is not None:
            min_count = templates[template]
            if min_count is not None and min_count > s.count:
                raise PodSetError(
                    f"the Workload's pod group {short(template)} has minCount {min_count}, more than "
                    f"the {s.count} pods of pod set {short(s.name)}: it could never start",
                    path=member("$.metadata.annotations", WORKLOAD_ANNOTATION),
                )
        if group != s.group or min_count != s.min_count:
            s = structs.replace(s, group=group, min_count=min_count)
        out.append(s)
    return out
