"""The job kinds the adapter creates on workers and watches on the manager.

A deliberate copy of the coordinates in ``webhook/kinds.py`` (reconciler must not import webhook):
where each kind keeps ``suspend`` and ``managedBy``. Kinds not served by a cluster are skipped.
"""

from __future__ import annotations

from msgspec import Struct


class Kind(Struct, frozen=True):
    group: str
    version: str
    kind: str
    plural: str
    suspend_path: tuple[str, ...] | None = ("spec", "suspend")
    managed_by_path: tuple[str, ...] | None = ("spec", "managedBy")

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


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
    _kubeflow("MPIJob", "v2beta1"),
    Kind("trainer.kubeflow.org", "v1alpha1", "TrainJob", "trainjobs"),
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
