"""The job kinds kdispatch dispatches: API coordinates and where each keeps suspend and managedBy.

``SUPPORTED_KINDS`` is read by the webhook and by deploy's WebhookConfigurations (rules are built
from ``group``/``version``/``plural``). Facts from /work/shared/KINDS.md.
"""

from __future__ import annotations

from typing import Literal

from msgspec import Struct

MANAGED_BY = "kueue.x-k8s.io/multikueue"
"""The one managedBy value every kind's own validation accepts (see KINDS.md)."""

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
POD_SCHEDULING_GATE = "kdispatch.io/dispatch"
"""Plain Pods have no suspend field: they are held by this scheduling gate (added at CREATE)."""

HoldStyle = Literal["suspend", "inactive", "gate"]


class KindInfo(Struct, frozen=True, kw_only=True):
    group: str
    version: str
    kind: str
    plural: str
    hold: HoldStyle = "suspend"
    suspend_path: tuple[str, ...] = ("spec", "suspend")
    managed_by_path: tuple[str, ...] | None = ("spec", "managedBy")
    default_controllers: tuple[str, ...] = ()  # managedBy values that mean "the kind's own controller"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


_RUN_POLICY_SUSPEND = ("spec", "runPolicy", "suspend")
_RUN_POLICY_MANAGED_BY = ("spec", "runPolicy", "managedBy")


def _kubeflow(kind: str, *, version: str = "v1", controller: str = "kubeflow.org/training-operator") -> KindInfo:
    return KindInfo(
        group="kubeflow.org",
        version=version,
        kind=kind,
        plural=kind.lower() + "s",
        suspend_path=_RUN_POLICY_SUSPEND,
        managed_by_path=_RUN_POLICY_MANAGED_BY,
        default_controllers=(controller,),
    )


def _workload(version: str) -> KindInfo:
    return KindInfo(
        group="kueue.x-k8s.io",
        version=version,
        kind="Workload",
        plural="workloads",
        hold="inactive",
        suspend_path=("spec", "active"),
        managed_by_path=None,
    )


SUPPORTED_KINDS: tuple[KindInfo, ...] = (
    KindInfo(group="batch", version="v1", kind="Job", plural="jobs", default_controllers=("kubernetes.io/job-controller",)),
    KindInfo(
        group="jobset.x-k8s.io",
        version="v1alpha2",
        kind="JobSet",
        plural="jobsets",
        default_controllers=("jobset.sigs.k8s.io/jobset-controller",),
    ),
    KindInfo(group="ray.io", version="v1", kind="RayJob", plural="rayjobs", default_controllers=("ray.io/kuberay-operator",)),
    KindInfo(
        group="ray.io", version="v1", kind="RayCluster", plural="rayclusters", default_controllers=("ray.io/kuberay-operator",)
    ),
    _kubeflow("PyTorchJob"),
    _kubeflow("TFJob"),
    _kubeflow("XGBoostJob"),
    _kubeflow("PaddleJob"),
    _kubeflow("JAXJob"),
    _kubeflow("MPIJob"),
    _kubeflow("MPIJob", version="v2beta1", controller="kubeflow.org/mpi-operator"),
    KindInfo(
        group="trainer.kubeflow.org",
        version="v1alpha1",
        kind="TrainJob",
        plural="trainjobs",
        default_controllers=("trainer.kubeflow.org/trainjob-controller",),
    ),
    KindInfo(
        group="workload.codeflare.dev",
        version="v1beta2",
        kind="AppWrapper",
        plural="appwrappers",
        default_controllers=("workload.codeflare.dev/appwrapper-controller",),
    ),
    KindInfo(group="", version="v1", kind="Pod", plural="pods", hold="gate", suspend_path=(), managed_by_path=None),
    _workload("v1beta1"),
    _workload("v1beta2"),
)

_BY_GVK: dict[tuple[str, str, str], KindInfo] = {(k.group, k.version, k.kind): k for k in SUPPORTED_KINDS}


def lookup(*, group: str, version: str, kind: str) -> KindInfo | None:
    return _BY_GVK.get((group, version, kind))


def lookup_api_version(api_version: str, kind: str) -> KindInfo | None:
    group, _, version = api_version.rpartition("/")
    return lookup(group=group, version=version, kind=kind)
