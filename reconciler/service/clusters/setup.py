"""The cluster adapters the config file names, built in one place.

``ClusterSet.from_config`` makes one worker per configured cluster (simulated or Kubernetes) and,
for Kubernetes, the API clients (the manager's too); ``registration`` is the
``ClusterRegistered`` each one is recorded with (once per content, thanks to its message id).
Connecting them to the actuator and running them is ``reconciler.service.wiring``'s work.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from typing import Any

import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio import config as kube_config

from eventlog import codec
from eventlog import events as ev
from reconciler.config import ClusterConfig, Config, ConfigError, KubeconfigConfig
from reconciler.edge.logging import get_logger
from reconciler.service.clusters.api import KubeApi
from reconciler.service.clusters.base import Worker
from reconciler.service.clusters.heartbeats import keepalive_ms
from reconciler.service.clusters.kube import KubeWorker
from reconciler.service.clusters.simulated import SimCluster
from reconciler.simworker import SimWorker

log = get_logger("reconciler.clusters.setup")


def registration(cfg: ClusterConfig, *, capacity: ev.Resources) -> tuple[ev.ClusterRegistered, str]:
    """The ``ClusterRegistered`` for a configured cluster and its content-derived message id."""
    event = ev.ClusterRegistered(
        cluster=cfg.name,
        labels=dict(cfg.labels),
        taints=list(cfg.taints),
        capacity=capacity,
        worker_lost_timeout_ms=cfg.worker_lost_timeout_ms,
    )
    digest = hashlib.sha256(codec.encode(event)).hexdigest()[:16]
    return event, f"{cfg.name}/registered/{digest}"


def heartbeat_keepalive_s(cfg: ClusterConfig, *, policy_lost_timeout_ms: int) -> float:
    """How often an unchanged heartbeat is still published for ``cfg``: a quarter of its
    worker-lost timeout (its own, else the policy's), in whole heartbeat intervals."""
    lost_ms = cfg.worker_lost_timeout_ms if cfg.worker_lost_timeout_ms is not None else policy_lost_timeout_ms
    return keepalive_ms(interval_ms=cfg.heartbeat_interval_ms, lost_timeout_ms=lost_ms) / 1000


def sim_cluster(cfg: ClusterConfig, *, keepalive_s: float | None = None) -> SimCluster:
    assert cfg.simulated is not None
    sim = cfg.simulated
    model = SimWorker(
        cfg.name,
        dict(sim.capacity),
        admission_latency_ms=sim.admission_latency_ms,
        default_runtime_ms=sim.default_runtime_ms,
    )
    interval_s = cfg.heartbeat_interval_ms / 1000
    return SimCluster(model, heartbeat_interval_s=interval_s, heartbeat_keepalive_s=keepalive_s)


async def api_client_for(
    kc: KubeconfigConfig | None, *, manager: KubeApi | None, what: str
) -> client.ApiClient:
    """An API client from a kubeconfig file, a kubeconfig in a Secret on the manager, or (no
    kubeconfig at all) the in-cluster service account. Nothing of the credentials is logged."""
    configuration = client.Configuration()
    if kc is None:
        try:
            kube_config.load_incluster_config(client_configuration=configuration)
        except kube_config.ConfigException as err:
            raise ConfigError(
                f"no kubeconfig given and not running in a cluster ({err}); set {what}.kubeconfig", path=what
            ) from None
    elif kc.path is not None:
        await kube_config.load_kube_config(
            config_file=kc.path, context=kc.context, client_configuration=configuration
        )
    elif kc.secret_ref is not None:
        ref = kc.secret_ref
        if manager is None:
            raise ConfigError(
                "a Secret reference needs the manager cluster's API", path=f"{what}.kubeconfig.secretRef"
            )
        secret = await manager.get_secret(ref.namespace, ref.name)
        data = (secret or {}).get("data") or {}
        if ref.key not in data:
            raise ConfigError(
                f"Secret {ref.namespace}/{ref.name} has no key {ref.key!r}",
                path=f"{what}.kubeconfig.secretRef",
            )
        loaded: Any = yaml.safe_load(base64.b64decode(data[ref.key]))
        await kube_config.load_kube_config_from_dict(
            loaded, context=kc.context, client_configuration=configuration
        )
    else:
        raise ConfigError("give either path or secretRef", path=f"{what}.kubeconfig")
    return client.ApiClient(configuration)


@dataclass
class ClusterSet:
    manager_id: str = "kdispatch"
    clusters: list[ClusterConfig] = field(default_factory=list)
    workers: dict[str, Worker] = field(default_factory=dict)
    capacities: dict[str, ev.Resources] = field(default_factory=dict)
    manager_api: KubeApi | None = None
    resync_s: int = 300
    gc_interval_s: float = 30.0
    api_clients: list[client.ApiClient] = field(default_factory=list)
    policy_lost_timeout_ms: int = 60_000  # for the keepalive of clusters declared later (declared.py)

    @classmethod
    async def from_config(
        cls, config: Config, *, manager_api_client: client.ApiClient | None = None
    ) -> ClusterSet:
        manager = config.manager
        resync_ms = manager.resync_ms if manager else 300_000
        gc_ms = manager.gc_interval_ms if manager else 30_000
        out = cls(
            manager_id=manager.id if manager else "kdispatch",
            clusters=list(config.clusters),
            resync_s=max(resync_ms // 1000, 1),
            gc_interval_s=gc_ms / 1000,
            policy_lost_timeout_ms=config.policy.worker_lost_timeout_ms,
        )
        try:
            await out._build(config, manager_api_client)
        except BaseException:
            await out.close()  # no client left open behind a configuration error
            raise
        return out

    async def _build(self, config: Config, manager_api_client: client.ApiClient | None) -> None:
        manager = config.manager
        # A Kubernetes worker needs the manager's API; a manager section alone asks for it too (the
        # WorkerCluster objects are followed there, so a fleet may start with no worker in the
        # file), but a simulated fleet outside a cluster keeps running without it, as before.
        needed = any(c.simulated is None for c in config.clusters)
        if needed or manager is not None:
            if manager_api_client is None:
                kc = manager.kubeconfig if manager else None
                try:
                    manager_api_client = await api_client_for(kc, manager=None, what="manager")
                except (ConfigError, kube_config.ConfigException, OSError):
                    if needed:
                        raise
                    log.info("manager_api_unavailable", hint="WorkerCluster objects are not followed")
                    return await self._build_workers(config)
                self.api_clients.append(manager_api_client)
            self.manager_api = KubeApi(manager_api_client, role="manager", cluster="manager")
        await self._build_workers(config)

    async def _build_workers(self, config: Config) -> None:
        for cfg in config.clusters:
            keepalive_s = heartbeat_keepalive_s(cfg, policy_lost_timeout_ms=config.policy.worker_lost_timeout_ms)
            if cfg.simulated is not None:
                sim = sim_cluster(cfg, keepalive_s=keepalive_s)
                self.workers[cfg.name] = sim
                self.capacities[cfg.name] = dict(sim.model.capacity)
            else:
                api_client = await api_client_for(
                    cfg.kubeconfig, manager=self.manager_api, what=f"clusters[{cfg.name}]"
                )
                self.api_clients.append(api_client)
                self.workers[cfg.name] = kube_worker(
                    cfg, api_client, manager_id=self.manager_id, resync_s=self.resync_s, keepalive_s=keepalive_s
                )
                self.capacities[cfg.name] = {}  # learnt from the cluster: ClusterUpdated follows

    async def close(self) -> None:
        for api_client in self.api_clients:
            await api_client.close()


def kube_worker(
    cfg: ClusterConfig,
    api_client: client.ApiClient,
    *,
    manager_id: str,
    resync_s: int,
    keepalive_s: float | None = None,
) -> KubeWorker:
    timeout_s = cfg.heartbeat_timeout_ms / 1000
    return KubeWorker(
        cfg.name,
        KubeApi(api_client, role="worker", cluster=cfg.name, timeout_s=max(timeout_s, 5.0)),
        manager_id=manager_id,
        labels=dict(cfg.labels),
        taints=list(cfg.taints),
        worker_lost_timeout_ms=cfg.worker_lost_timeout_ms,
        kueue=cfg.kueue,
        heartbeat_interval_s=cfg.heartbeat_interval_ms / 1000,
        heartbeat_timeout_s=timeout_s,
        heartbeat_keepalive_s=keepalive_s,
        resync_s=resync_s,
    )

