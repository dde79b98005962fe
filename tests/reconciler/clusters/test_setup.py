"""ClusterSet from the config file: kubeconfig files, kubeconfigs in Secrets, simulated clusters."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconciler.config import ConfigError, decode_config
from reconciler.service.clusters.kube import KubeWorker
from reconciler.service.clusters.setup import ClusterSet, registration
from reconciler.service.clusters.simulated import SimCluster
from tests.reconciler.clusters.conftest import ApiServer


def kubeconfig_doc(server: ApiServer, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server.url}}],
        "users": [{"name": name, "user": {"token": "t0ken"}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }


async def test_workers_from_a_kubeconfig_secret_on_the_manager_and_simulated_ones(
    api_servers: Any, tmp_path: Path
) -> None:
    manager: ApiServer = await api_servers("manager")
    worker: ApiServer = await api_servers("w1")
    manager.emulator.serve("", "v1", "secrets", kind="Secret")
    encoded = base64.b64encode(yaml.safe_dump(kubeconfig_doc(worker, "w1")).encode()).decode()
    manager.emulator.put(
        "",
        "v1",
        "secrets",
        {
            "metadata": {"name": "w1-kubeconfig", "namespace": "kdispatch-system"},
            "data": {"kubeconfig": encoded},
        },
    )
    (tmp_path / "manager.yaml").write_text(yaml.safe_dump(kubeconfig_doc(manager, "manager")))
    config = decode_config(
        {
            "manager": {"kubeconfig": {"path": str(tmp_path / "manager.yaml")}, "id": "m1"},
            "clusters": [
                {
                    "name": "w1",
                    "labels": {"zone": "a"},
                    "kubeconfig": {"secretRef": {"name": "w1-kubeconfig"}},
                },
                {
                    "name": "sim",
                    "simulated": {"capacity": {"cpu": "8", "memory": "16Gi"}, "admissionLatency": "1s"},
                },
            ],
        }
    )
    clusters = await ClusterSet.from_config(config)
    try:
        kube = clusters.workers["w1"]
        assert isinstance(kube, KubeWorker) and kube.manager_id == "m1" and kube.labels == {"zone": "a"}
        assert (await kube.api.version(timeout_s=2))["gitVersion"]  # it reaches the worker
        sim = clusters.workers["sim"]
        assert isinstance(sim, SimCluster)
        assert sim.model.capacity == {"cpu": 8000, "memory": 16 * 2**30}
        assert sim.model.admission_latency_ms == 1000
        event, msg_id = registration(config.clusters[1], capacity=clusters.capacities["sim"])
        assert event.capacity == {"cpu": 8000, "memory": 16 * 2**30}
        assert msg_id == registration(config.clusters[1], capacity=clusters.capacities["sim"])[1]  # stable
    finally:
        await clusters.close()


async def test_a_missing_secret_key_is_a_config_error_naming_the_cluster(
    api_servers: Any, tmp_path: Path
) -> None:
    manager: ApiServer = await api_servers("manager")
    manager.emulator.serve("", "v1", "secrets", kind="Secret")
    manager.emulator.put("", "v1", "secrets", {"metadata": {"name": "kc", "namespace": "ops"}, "data": {}})
    (tmp_path / "manager.yaml").write_text(yaml.safe_dump(kubeconfig_doc(manager, "manager")))
    config = decode_config(
        {
            "manager": {"kubeconfig": {"path": str(tmp_path / "manager.yaml")}},
            "clusters": [{"name": "w9", "kubeconfig": {"secretRef": {"name": "kc", "namespace": "ops"}}}],
        }
    )
    with pytest.raises(
        ConfigError, match=r"clusters\[w9\].kubeconfig.secretRef: Secret ops/kc has no key 'kubeconfig'"
    ):
        await ClusterSet.from_config(config)


def test_a_bad_simulated_capacity_is_a_config_error_at_decode() -> None:
    with pytest.raises(
        ConfigError, match=r"\$\.clusters\[0\]\.simulated\.capacity: memory: 'lots' is not a quantity"
    ):
        decode_config({"clusters": [{"name": "s", "simulated": {"capacity": {"memory": "lots"}}}]})


async def test_a_manager_section_is_followed_for_worker_clusters_but_optional_for_a_simulated_fleet(
    api_servers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WorkerCluster objects live on the manager: a manager section alone connects to it (a fleet
    may declare every worker as an object); a simulated fleet outside a cluster starts without."""
    manager: ApiServer = await api_servers("manager")
    path = tmp_path / "manager.yaml"
    path.write_text(yaml.safe_dump(kubeconfig_doc(manager, "manager")))
    sims = [{"name": "sim", "simulated": {"capacity": {"cpu": 8}}}]
    with_manager = await ClusterSet.from_config(decode_config({"manager": {"kubeconfig": {"path": str(path)}}}))
    try:
        assert with_manager.manager_api is not None and with_manager.workers == {}
    finally:
        await with_manager.close()
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    outside = await ClusterSet.from_config(decode_config({"manager": {"id": "m"}, "clusters": sims}))
    assert outside.manager_api is None and list(outside.workers) == ["sim"]
    with pytest.raises(ConfigError, match="not running in a cluster"):
        await ClusterSet.from_config(decode_config({"manager": {"id": "m"}, "clusters": [{"name": "k"}]}))
