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


class KindInfo(Struct, frozen=True):
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
_KUBEFLOW_V1 = ("kubeflow.org/training-operator",)


def _kubeflow_v1(kind: str) -> KindInfo:
    return KindInfo(
        "kubeflow.org",
        "v1",
        kind,
        kind.lower() + "s",
        suspend_path=_RUN_POLICY_SUSPEND,
        managed_by_path=_RUN_POLICY_MANAGED_BY,
        default_controllers=_KUBEFLOW_V1,
    )


SUPPORTED_KINDS: tuple[KindInfo, ...] = (
    KindInfo("batch", "v1", "Job", "jobs", default_controllers=("kubernetes.io/job-controller",)),
    KindInfo(
        "jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets", default_controllers=("jobset.sigs.k8s.io/jobset-controller",)
    ),
    KindInfo("ray.io", "v1", "RayJob", "rayjobs", default_controllers=("ray.io/kuberay-operator",)),
    KindInfo("ray.io", "v1", "RayCluster", "rayclusters", default_controllers=("ray.io/kuberay-operator",)),
    _kubeflow_v1("PyTorchJob"),
    _kubeflow_v1("TFJob"),
    _kubeflow_v1("XGBoostJob"),
    _kubeflow_v1("PaddleJob"),
    _kubeflow_v1("JAXJob"),
    _kubeflow_v1("MPIJob"),
    KindInfo(
        "kubeflow.org",
        "v2beta1",
        "MPIJob",
        "mpijobs",
        suspend_path=_RUN_POLICY_SUSPEND,
        managed_by_path=_RUN_POLICY_MANAGED_BY,
        default_controllers=("kubeflow.org/mpi-operator",),
    ),
    KindInfo(
        "trainer.kubeflow.org",
        "v1alpha1",
        "TrainJob",
        "trainjobs",
        default_controllers=("trainer.kubeflow.org/trainjob-controller",),
    ),
    KindInfo(
        "workload.codeflare.dev",
        "v1beta2",
        "AppWrapper",
        "appwrappers",
        default_controllers=("workload.codeflare.dev/appwrapper-controller",),
    ),
    KindInfo("", "v1", "Pod", "pods", hold="gate", suspend_path=(), managed_by_path=None),
    KindInfo(
        "kueue.x-k8s.io", "v1beta1", "Workload", "workloads", hold="inactive", suspend_path=("spec", "active"), managed_by_path=None
    ),
    KindInfo(
        "kueue.x-k8s.io", "v1beta2", "Workload", "workloads", hold="inactive", suspend_path=("spec", "active"), managed_by_path=None
    ),
)

_BY_GVK: dict[tuple[str, str, str], KindInfo] = {(k.group, k.version, k.kind): k for k in SUPPORTED_KINDS}


def lookup(*, group: str, version: str, kind: str) -> KindInfo | None:
    return _BY_GVK.get((group, version, kind))


def lookup_api_version(api_version: str, kind: str) -> KindInfo | None:
    group, _, version = api_version.rpartition("/")
    return lookup(group=group, version=version, kind=kind)
