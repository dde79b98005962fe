"""The ``WorkerCluster`` object (``kdispatch.io/v1alpha1``, cluster-scoped): a worker cluster an
operator declares with ``kubectl apply`` instead of in the config file (docs/clusters.md).

Shaped like Kueue's ``MultiKueueCluster`` (``spec.kubeConfig: {locationType, location}``), plus
what kdispatch places by and how it lets go of a cluster::

    apiVersion: kdispatch.io/v1alpha1
    kind: WorkerCluster
    metadata: {name: worker-b}
    spec:
      kubeConfig: {locationType: Secret, location: worker-b-kubeconfig}  # key "kubeconfig", in kdispatch-workers
      labels: {region: eu-west}
      taints: [{key: spot, effect: PreferNoSchedule}]
      workerLostTimeout: 2m
      drainPolicy: Leave        # or Withdraw

``declared`` turns one object into the ``ClusterConfig`` a config-file cluster would have (the same
decoder, so the same units, defaults and errors), its drain policy, and whether it is being deleted.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Literal

from eventlog import events as ev
from eventlog.kube.names import DRAINING_TAINT, PREFIX
from reconciler.config import ClusterConfig, ConfigError, decode

GROUP = "kdispatch.io"
VERSION = "v1alpha1"
PLURAL = "workerclusters"
KIND = "WorkerCluster"

FINALIZER = PREFIX + "drain"
"""Held on every WorkerCluster kdispatch follows: deleting one leaves it in place, marked for
deletion, until its cluster is drained and recorded as removed."""

SECRETS_NAMESPACE = "kdispatch-workers"
"""Where the kubeconfig Secrets of declared clusters live: the reconciler may read any Secret here
and none elsewhere (deploy/base/rbac.yaml), so adding a worker needs no RBAC change."""

SECRET_KEY = "kubeconfig"  # the key MultiKueue reads too

DrainPolicy = Literal["Leave", "Withdraw"]
DRAIN_POLICIES: tuple[DrainPolicy, ...] = ("Leave", "Withdraw")

# The spec fields a config-file cluster has under the same name (decoded by reconciler.config).
_SHARED = ("labels", "taints", "kueue", "workerLostTimeout", "heartbeatInterval", "heartbeatTimeout")
_OWN = ("kubeConfig", "drainPolicy")


@dataclass(frozen=True)
class Declared:
    """One WorkerCluster, decoded."""

    uid: str
    generation: int
    config: ClusterConfig
    drain_policy: DrainPolicy
    deleting: bool  # metadata.deletionTimestamp is set: drain it

    @property
    def name(self) -> str:
        return self.config.name

    def draining_config(self) -> ClusterConfig:
        """The config with the drain taint: what the cluster is registered with from now on."""
        return with_drain_taint(self.config, self.drain_policy)


def drain_taint(policy: DrainPolicy) -> ev.Taint:
    """Leave: nothing new is placed there, what runs stays (NoSchedule). Withdraw: what runs is
    withdrawn and requeued elsewhere, as for any NoExecute taint (NoExecute)."""
    return ev.Taint(key=DRAINING_TAINT, effect="NoExecute" if policy == "Withdraw" else "NoSchedule")


def with_drain_taint(cfg: ClusterConfig, policy: DrainPolicy) -> ClusterConfig:
    import msgspec

    taints = [t for t in cfg.taints if t.key != DRAINING_TAINT] + [drain_taint(policy)]
    return msgspec.structs.replace(cfg, taints=taints)


def is_draining(taints: list[ev.Taint]) -> bool:
    return any(t.key == DRAINING_TAINT for t in taints)


def declared(obj: dict[str, Any]) -> Declared:
    """Decode a WorkerCluster; ``ConfigError`` (with the field's JSON path) if it is not valid."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    source = f"WorkerCluster {name}"
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        raise ConfigError("a WorkerCluster needs a spec with kubeConfig", path="$.spec", source=source)
    for key in spec:
        if key not in (*_SHARED, *_OWN):
            close = difflib.get_close_matches(str(key), [*_SHARED, *_OWN], n=1)
            hint = f" (did you mean `{close[0]}`?)" if close else ""
            accepted = ", ".join((*_OWN, *_SHARED))
            raise ConfigError(f"unknown field `{key}`{hint}; accepted: {accepted}", path="$.spec", source=source)
    policy = spec.get("drainPolicy", "Leave")
    if policy not in DRAIN_POLICIES:
        raise ConfigError(
            f"{policy!r} is not a drain policy; accepted: {', '.join(DRAIN_POLICIES)}",
            path="$.spec.drainPolicy",
            source=source,
        )
    raw = {k: spec[k] for k in _SHARED if k in spec}
    raw["name"] = name
    raw["kubeconfig"] = _kubeconfig(spec.get("kubeConfig"), source=source)
    try:
        config = decode(raw, ClusterConfig, source=source)
    except ConfigError as err:
        raise ConfigError(err.message, path="$.spec" + err.path.removeprefix("$"), source=source) from None
    return Declared(
        uid=str(meta.get("uid") or ""),
        generation=int(meta.get("generation") or 0),
        config=config,
        drain_policy=policy,
        deleting=bool(meta.get("deletionTimestamp")),
    )


def _kubeconfig(raw: Any, *, source: str) -> dict[str, Any]:
    path = "$.spec.kubeConfig"
    if not isinstance(raw, dict) or not raw.get("location"):
        raise ConfigError(
            "give the worker's kubeconfig: {locationType: Secret, location: <Secret name in "
            f"{SECRETS_NAMESPACE}, key {SECRET_KEY!r}>}}",
            path=path,
            source=source,
        )
    kind = raw.get("locationType", "Secret")
    location = str(raw["location"])
    if kind == "Secret":
        return {"secretRef": {"name": location, "namespace": SECRETS_NAMESPACE, "key": SECRET_KEY}}
    if kind == "Path":  # a file in the reconciler's pod (MultiKueue has it too)
        return {"path": location}
    raise ConfigError(f"{kind!r} is not a locationType; accepted: Secret, Path", path=f"{path}.locationType", source=source)
