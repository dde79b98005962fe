"""The job kinds kdispatch dispatches: one table for the webhook and the reconciler.

Per kind: its API coordinates (group, version, kind, plural resource), where it keeps suspend and
managedBy, how kdispatch holds it, and which family of rules reads its pod sets. The kinds are
Kueue's job integrations (``batch/job``, ``jobset.x-k8s.io/jobset``, ``ray.io/rayjob``,
``ray.io/raycluster``, ``kubeflow.org/pytorchjob``, ``tfjob``, ``xgboostjob``, ``paddlejob``,
``jaxjob``, ``mpijob``, ``trainer.kubeflow.org/trainjob``, ``workload.codeflare.dev/appwrapper``,
``pod``) plus Kueue's own Workload; the fields are the ones those integrations read.

Read by the webhook (which objects it admits and how it holds them), by deploy's
WebhookConfigurations (rules from ``group``/``version``/``plural``) and by the reconciler (what it
watches on the manager, creates on workers, how it releases the hold there, its RBAC).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from msgspec import Struct

HoldStyle = Literal["suspend", "inactive", "gate"]
"""How the webhook holds an object until it is dispatched: ``suspend`` sets a boolean (and
managedBy, so the kind's own controller leaves it alone); ``inactive`` sets a Kueue Workload's
``spec.active`` to false; ``gate`` adds a scheduling gate to a plain Pod (it has no suspend field)."""

Family = Literal[
    "job", "jobset", "ray-cluster", "ray-job", "kubeflow", "trainjob", "appwrapper", "pod", "workload"
]
"""Which Kueue integration's rules read the kind's pod sets (and, for ``kubeflow``, its priority
class from ``runPolicy.schedulingPolicy``)."""


class KindInfo(Struct, frozen=True, kw_only=True):
    group: str
    version: str
    kind: str
    plural: str
    family: Family
    hold: HoldStyle = "suspend"
    suspend_path: tuple[str, ...] = ("spec", "suspend")  # () for a Pod: it is held by a gate
    managed_by_path: tuple[str, ...] | None = ("spec", "managedBy")
    default_controllers: tuple[str, ...] = ()  # managedBy values that mean "the kind's own controller"
    replica_specs: str = ""  # kubeflow: the field of ``spec`` holding the replica specs
    roles: tuple[str, ...] = ()  # kubeflow: the replica roles that are pod sets, in Kueue's order

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> tuple[str, str]:
        """(group, plural): two versions of one resource are the same objects."""
        return (self.group, self.plural)

    @property
    def status_synced(self) -> bool:
        """Is the placed copy's status written back onto the manager object? Not for a Workload:
        the manager's own Kueue owns its status (it shows the hold, ``active: false``)."""
        return self.hold != "inactive"


def _kubeflow(
    kind: str,
    replica_specs: str,
    roles: tuple[str, ...],
    *,
    version: str = "v1",
    controller: str = "kubeflow.org/training-operator",
) -> KindInfo:
    return KindInfo(
        group="kubeflow.org",
        version=version,
        kind=kind,
        plural=kind.lower() + "s",
        family="kubeflow",
        suspend_path=("spec", "runPolicy", "suspend"),
        managed_by_path=("spec", "runPolicy", "managedBy"),
        default_controllers=(controller,),
        replica_specs=replica_specs,
        roles=roles,
    )


def _workload(version: str) -> KindInfo:
    return KindInfo(
        group="kueue.x-k8s.io",
        version=version,
        kind="Workload",
        plural="workloads",
        family="workload",
        hold="inactive",
        suspend_path=("spec", "active"),
        managed_by_path=None,
    )


_MPI_ROLES = ("launcher", "worker")

SUPPORTED_KINDS: tuple[KindInfo, ...] = (
    KindInfo(
        group="batch",
        version="v1",
        kind="Job",
        plural="jobs",
        family="job",
        default_controllers=("kubernetes.io/job-controller",),
    ),
    KindInfo(
        group="jobset.x-k8s.io",
        version="v1alpha2",
        kind="JobSet",
        plural="jobsets",
        family="jobset",
        default_controllers=("jobset.sigs.k8s.io/jobset-controller",),
    ),
    KindInfo(
        group="ray.io",
        version="v1",
        kind="RayJob",
        plural="rayjobs",
        family="ray-job",
        default_controllers=("ray.io/kuberay-operator",),
    ),
    KindInfo(
        group="ray.io",
        version="v1",
        kind="RayCluster",
        plural="rayclusters",
        family="ray-cluster",
        default_controllers=("ray.io/kuberay-operator",),
    ),
    _kubeflow("PyTorchJob", "pytorchReplicaSpecs", ("master", "worker")),
    _kubeflow("TFJob", "tfReplicaSpecs", ("chief", "master", "ps", "worker", "evaluator")),
    _kubeflow("XGBoostJob", "xgbReplicaSpecs", ("master", "worker")),
    _kubeflow("PaddleJob", "paddleReplicaSpecs", ("master", "worker")),
    _kubeflow("JAXJob", "jaxReplicaSpecs", ("worker",)),
    # training-operator's v1 and mpi-operator's v2beta1 serve the same resource, mpijobs.kubeflow.org.
    _kubeflow("MPIJob", "mpiReplicaSpecs", _MPI_ROLES),
    _kubeflow(
        "MPIJob", "mpiReplicaSpecs", _MPI_ROLES, version="v2beta1", controller="kubeflow.org/mpi-operator"
    ),
    KindInfo(
        group="trainer.kubeflow.org",
        version="v1alpha1",
        kind="TrainJob",
        plural="trainjobs",
        family="trainjob",
        default_controllers=("trainer.kubeflow.org/trainjob-controller",),
    ),
    KindInfo(
        group="workload.codeflare.dev",
        version="v1beta2",
        kind="AppWrapper",
        plural="appwrappers",
        family="appwrapper",
        default_controllers=("workload.codeflare.dev/appwrapper-controller",),
    ),
    KindInfo(
        group="",
        version="v1",
        kind="Pod",
        plural="pods",
        family="pod",
        hold="gate",
        suspend_path=(),
        managed_by_path=None,
    ),
    _workload("v1beta1"),
    _workload("v1beta2"),
)

_BY_GVK: dict[tuple[str, str, str], KindInfo] = {(k.group, k.version, k.kind): k for k in SUPPORTED_KINDS}


def lookup(*, group: str, version: str, kind: str) -> KindInfo | None:
    return _BY_GVK.get((group, version, kind))


def lookup_api_version(api_version: str, kind: str) -> KindInfo | None:
    group, _, version = api_version.rpartition("/")
    return lookup(group=group, version=version, kind=kind)


def by_resource(kinds: Iterable[KindInfo]) -> list[tuple[KindInfo, ...]]:
    """The kinds grouped by resource, versions in table order: one watch serves each group (the
    first version the cluster serves), so an object served in two versions is seen once."""
    groups: dict[tuple[str, str], list[KindInfo]] = {}
    for k in kinds:
        groups.setdefault(k.resource, []).append(k)
    return [tuple(g) for g in groups.values()]
