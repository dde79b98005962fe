"""The job kinds the adapter creates on workers and watches on the manager.

A deliberate copy of ``webhook/kinds.py: SUPPORTED_KINDS`` (reconciler must not import webhook;
tests/reconciler/clusters/test_kinds_alignment.py asserts the two lists agree): where each kind
keeps ``managedBy`` and how the webhook holds it (``suspend``: a boolean field set to true;
``inactive``: Kueue Workload ``spec.active`` set to false; ``gate``: a plain Pod's scheduling gate).
Kinds not served by a cluster are skipped.
"""

from __future__ import annotations

from typing import Literal

from msgspec import Struct

HoldStyle = Literal["suspend", "inactive", "gate"]
POD_SCHEDULING_GATE = "kdispatch.io/dispatch"  # the webhook's gate on a held plain Pod


class Kind(Struct, frozen=True):
    group: str
    version: str
    kind: str
    plural: str
    suspend_path: tuple[str, ...] | None = ("spec", "suspend")
    managed_by_path: tuple[str, ...] | None = ("spec", "managedBy")
    hold: HoldStyle = "suspend"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def status_synced(self) -> bool:
        """Is the placed copy's status written back onto the manager object? Not for a Workload:
        the manager's own Kueue owns its status (it shows the hold, ``active: false``)."""
        return self.hold != "inactive"

    @property
    def resource(self) -> tuple[str, str]:
        """(group, plural): two versions of one resource are the same objects."""
        return (self.group, self.plural)


_RUN_POLICY = ("spec", "runPolicy")


def _kubeflow(kind: str, version: str = "v1") -> Kind:
    return Kind(
        "kubeflow.org",
        version,
        kind,
        kind.lower() + "s",
        (*_RUN_POLICY, "suspend"),
        (*_RUN_POLICY, "managedBy"),
    )


def _workload(version: str) -> Kind:
    return Kind("kueue.x-k8s.io", version, "Workload", "workloads", ("spec", "active"), None, "inactive")


KINDS: tuple[Kind, ...] = (
    Kind("batch", "v1", "Job", "jobs"),
    Kind("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets"),
    Kind("ray.io", "v1", "RayJob", "rayjobs"),
    Kind("ray.io", "v1", "RayCluster", "rayclusters"),
    _kubeflow("PyTorchJob"),
    _kubeflow("TFJob"),
    _kubeflow("XGBoostJob"),
    _kubeflow("PaddleJob"),
    _kubeflow("JAXJob"),
    _kubeflow("MPIJob"),  # training-operator v1: mpijobs.kubeflow.org, as mpi-operator's v2beta1
    _kubeflow("MPIJob", "v2beta1"),
    Kind("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs"),
    Kind("workload.codeflare.dev", "v1beta2", "AppWrapper", "appwrappers"),
    Kind("", "v1", "Pod", "pods", None, None, "gate"),
    _workload("v1beta1"),
    _workload("v1beta2"),
)

_BY_API: dict[tuple[str, str], Kind] = {(k.api_version, k.kind): k for k in KINDS}


def kind_for(api_version: str, kind: str) -> Kind | None:
    return _BY_API.get((api_version, kind))


def kinds_named(names: list[str] | None) -> tuple[Kind, ...]:
    """The kinds selected by ``Kind`` names (all when None), in table order."""
    if names is None:
        return KINDS
    wanted = set(names)
    return tuple(k for k in KINDS if k.kind in wanted)


def by_resource(kinds: tuple[Kind, ...]) -> list[tuple[Kind, ...]]:
    """The kinds grouped by resource, versions in table order: one watch serves each group (the
    first version the cluster serves), so an object served in two versions is seen once."""
    groups: dict[tuple[str, str], list[Kind]] = {}
    for k in kinds:
        groups.setdefault(k.resource, []).append(k)
    return [tuple(g) for g in groups.values()]
