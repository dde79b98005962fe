"""What every kind shares: the pod template as a Struct, the pod set type and its errors, and the
per-pod request rule (KINDS.md, "Per-pod request rule").

Mutating admission runs before the API server validates the object, so each kind's spec is
decoded (``decode``) into the Structs of its module: a field of the wrong type raises
``PodSetError`` with its JSON path, which the webhook turns into a denial a person can act on.
Quantities are kept as sent and parsed by ``eventlog.kube.quantity``, which says what it accepts; the
path of a bad one is put together only then.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from msgspec import Struct

from eventlog import events as ev
from eventlog.kube.quantity import QuantityError, parse_nanos, to_integer
from webhook.objects import ObjectError, convert, member

T = TypeVar("T")

Amounts = dict[str, int]  # nano-units
Quantities = dict[str, Any]  # resource name -> quantity as sent ("500m", 2, "1Gi")


class PodSetError(ObjectError):
    """The object's pod sets cannot be read: ``path`` says where (JSON path)."""


class NotDispatchable(ValueError):
    """A supported kind in a form kdispatch cannot move to another cluster (allowed, left alone)."""


# ---- the pod template, as far as kdispatch reads it --------------------------------------------


class ResourceRequirements(Struct, frozen=True, gc=False):
    requests: Quantities | None = None
    limits: Quantities | None = None


class Container(Struct, frozen=True, gc=False, rename="camel"):
    resources: ResourceRequirements | None = None
    restart_policy: str | None = None  # "Always" on an init container makes it a sidecar


class MatchExpression(Struct, frozen=True, gc=False):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] | None = None


class NodeSelectorTerm(Struct, frozen=True, gc=False, rename="camel"):
    match_expressions: list[MatchExpression] | None = None
    match_fields: list[MatchExpression] | None = None  # metadata.name: nodes are not named in the facts


class NodeSelector(Struct, frozen=True, gc=False, rename="camel"):
    node_selector_terms: list[NodeSelectorTerm] | None = None


class NodeAffinity(Struct, frozen=True, gc=False, rename="camel"):
    required_during_scheduling_ignored_during_execution: NodeSelector | None = None


class Affinity(Struct, frozen=True, gc=False, rename="camel"):
    node_affinity: NodeAffinity | None = None


class Toleration(Struct, frozen=True, gc=False, rename="camel"):
    key: str | None = None
    operator: Literal["Equal", "Exists"] | None = None
    value: str | None = None
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = None


class SchedulingGroup(Struct, frozen=True, gc=False, rename="camel"):
    """``spec.schedulingGroup`` (Kubernetes 1.36, Workload API v1alpha2): the PodGroup of the pod."""

    pod_group_name: str | None = None


class WorkloadReference(Struct, frozen=True, gc=False, rename="camel"):
    """``spec.workloadRef`` (Kubernetes 1.35, Workload API v1alpha1): Workload and pod group."""

    name: str | None = None
    pod_group: str | None = None


class PodSpec(Struct, frozen=True, gc=False, rename="camel"):
    containers: list[Container] | None = None
    init_containers: list[Container] | None = None
    resources: ResourceRequirements | None = None  # pod-level resources
    overhead: Quantities | None = None
    priority_class_name: str | None = None
    node_selector: dict[str, str] | None = None
    affinity: Affinity | None = None
    tolerations: list[Toleration] | None = None
    scheduling_group: SchedulingGroup | None = None
    workload_ref: WorkloadReference | None = None


class TemplateMeta(Struct, frozen=True, gc=False):
    annotations: dict[str, str] | None = None


class PodTemplate(Struct, frozen=True, gc=False):
    metadata: TemplateMeta | None = None
    spec: PodSpec | None = None


EMPTY_POD = PodSpec()


def pod_spec(template: PodTemplate | None) -> PodSpec:
    return template.spec if template is not None and template.spec is not None else EMPTY_POD


def template_annotations(template: PodTemplate | None) -> dict[str, str]:
    """The pod template's own annotations (Kueue reads a pod set's topology request there)."""
    if template is None or template.metadata is None:
        return {}
    return template.metadata.annotations or {}


def decode(raw: Any, into: type[T], *, path: str) -> T:
    """``raw`` (JSON as sent, ``null`` meaning absent) as ``into``, or ``PodSetError``."""
    return into() if raw is None else convert(raw, into, path=path, error=PodSetError)


class PodSetSpec(Struct, frozen=True, kw_only=True, gc=False):
    name: str
    count: int
    spec: PodSpec
    path: str  # JSON path of ``spec`` in the object, for messages
    min_count: int | None = None
    sidecars: bool = True  # restartPolicy Always on init containers makes them sidecars
    pod_level: bool = True  # pod-level resources (spec.resources) apply
    annotations: dict[str, str] = {}  # the pod template's (topology requests)
    group: str | None = None  # the Workload API pod group (podsets.constraints)


# ---- the per-pod request rule ----------------------------------------------------------------


def add(a: Amounts, b: Amounts) -> Amounts:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


def max_of(a: Amounts, b: Amounts) -> Amounts:
    out = dict(a)
    for k, v in b.items():
        out[k] = max(out[k], v) if k in out else v
    return out


class _BadQuantity(Exception):
    """A quantity that does not parse; ``where`` is its path inside the ``resources`` (or overhead)
    it was read from. The full JSON path is put together only then, not for every container."""

    def __init__(self, where: tuple[str, ...], message: str) -> None:
        super().__init__(message)
        self.where = where
        self.message = message

    def at(self, path: str) -> PodSetError:
        for key in self.where:
            path = member(path, key)
        return PodSetError(self.message, path=path)


def _amounts(raw: Quantities | None, *, within: tuple[str, ...] = ()) -> Amounts:
    out: Amounts = {}
    if raw:
        for name, value in raw.items():
            try:
                out[name] = parse_nanos(value)
            except QuantityError as err:
                raise _BadQuantity((*within, name), str(err)) from None
    return out


def _requests(resources: ResourceRequirements | None) -> Amounts:
    """requests, with limits standing in for missing keys (Kueue's template adjustment)."""
    if resources is None:
        return {}
    requests = _amounts(resources.requests, within=("requests",))
    # parsed even when shadowed: a bad limit is denied
    for name, value in _amounts(resources.limits, within=("limits",)).items():
        requests.setdefault(name, value)
    return requests


def requests_of(resources: ResourceRequirements | None, path: str) -> Amounts:
    """``_requests`` for one container; ``path`` is the JSON path of ``resources``."""
    try:
        return _requests(resources)
    except _BadQuantity as bad:
        raise bad.at(path) from None


def amounts(raw: Quantities, path: str) -> Amounts:
    try:
        return _amounts(raw)
    except _BadQuantity as bad:
        raise bad.at(path) from None


def _pod_level_key(name: str) -> bool:
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def pod_requests(spec: PodSpec, *, path: str, sidecars: bool = True, pod_level: bool = True) -> Amounts:
    """component-helpers ``PodRequests`` after Kueue's adjustments, exact."""
    total: Amounts = {}
    for i, c in enumerate(spec.containers or ()):
        try:
            total = add(total, _requests(c.resources))
        except _BadQuantity as bad:
            raise bad.at(f"{path}.containers[{i}].resources") from None
    running_sidecars: Amounts = {}
    init_max: Amounts = {}
    for i, ic in enumerate(spec.init_containers or ()):
        try:
            req = _requests(ic.resources)
        except _BadQuantity as bad:
            raise bad.at(f"{path}.initContainers[{i}].resources") from None
        if sidecars and ic.restart_policy == "Always":
            total = add(total, req)
            running_sidecars = add(running_sidecars, req)
            use = running_sidecars
        else:
            use = add(req, running_sidecars)
        init_max = max_of(init_max, use)
    if init_max:
        total = max_of(total, init_max)
    # Most pods set neither: no path is put together for them (only an error needs one).
    if pod_level and spec.resources is not None:
        for name, value in requests_of(spec.resources, f"{path}.resources").items():
            if _pod_level_key(name):
                total[name] = value
    if spec.overhead:
        return add(total, amounts(spec.overhead, f"{path}.overhead"))
    return total


def to_integers(amounts: Amounts) -> ev.Resources:
    return {name: to_integer(name, amounts[name]) for name in sorted(amounts)}
