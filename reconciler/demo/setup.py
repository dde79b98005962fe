"""The demo's world: four simulated worker clusters and the policy, as a kdispatch config file.

Written to ``<data-dir>/demo-config.yaml`` so the webhook child reads the same priority classes
and a person can rerun anything by hand with ``--config``.

- ``east-a100``: the big general-purpose cluster (A100 GPUs, no taints). It goes silent midway.
- ``west-h100``: a few H100s behind a ``kdispatch.io/gpu=h100:NoSchedule`` taint.
- ``central-cpu``: CPU only, labelled ``tier=batch``.
- ``north-spot``: T4 spot capacity behind ``kdispatch.io/spot=true:NoSchedule``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from reconciler.config import Config, decode_config
from reconciler.demo.workload import PRIORITY_CLASSES

SILENT_CLUSTER = "east-a100"
WORKER_LOST_TIMEOUT_S = 4  # shortened for the demo (the default is 60 s)
HEARTBEAT_INTERVAL_S = 0.5

# The built-in default profile with a round timeout fit for a three-minute demo.
PROFILE: dict[str, Any] = {
    "name": "default",
    "filters": [
        "ClusterHealth",
        "ClusterPinning",
        "ClusterSelector",
        "ClusterAffinity",
        "ClusterTaints",
        "ClusterFeasibility",
        "ClusterHeadroom",
    ],
    "scores": [
        {"name": "ClusterAffinityScore", "weight": 2},
        {"name": "ClusterTaintScore", "weight": 1},
        {"name": "CapacityScore", "weight": 1},
    ],
    "strategy": {"type": "TopK", "k": 1},
    "roundTimeout": "10s",
}

CLUSTERS: list[dict[str, Any]] = [
    {
        "name": "east-a100",
        "labels": {"region": "east", "tier": "prod", "kdispatch.io/gpu": "a100"},
        "simulated": {"capacity": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "16"}, "admissionLatency": "200ms"},
    },
    {
        "name": "west-h100",
        "labels": {"region": "west", "tier": "prod", "kdispatch.io/gpu": "h100"},
        "taints": [{"key": "kdispatch.io/gpu", "value": "h100", "effect": "NoSchedule"}],
        "simulated": {"capacity": {"cpu": "40", "memory": "256Gi", "nvidia.com/gpu": "8"}, "admissionLatency": "300ms"},
    },
    {
        "name": "central-cpu",
        "labels": {"region": "central", "tier": "batch"},
        "simulated": {"capacity": {"cpu": "96", "memory": "384Gi", "nvidia.com/gpu": "0"}, "admissionLatency": "100ms"},
    },
    {
        "name": "north-spot",
        "labels": {"region": "north", "tier": "spot", "kdispatch.io/gpu": "t4"},
        "taints": [{"key": "kdispatch.io/spot", "value": "true", "effect": "NoSchedule"}],
        "simulated": {"capacity": {"cpu": "32", "memory": "192Gi", "nvidia.com/gpu": "8"}, "admissionLatency": "500ms"},
    },
]


def _clusters() -> list[dict[str, Any]]:
    return [{**c, "heartbeatInterval": f"{round(HEARTBEAT_INTERVAL_S * 1000)}ms"} for c in CLUSTERS]


def config_document(data_dir: Path) -> dict[str, Any]:
    return {
        "dataDir": str(data_dir),
        "policy": {
            "workerLostTimeout": f"{WORKER_LOST_TIMEOUT_S}s",
            "claimTtl": "60s",
            "requeueBackoff": "1s",
            "priorityClasses": dict(PRIORITY_CLASSES),
            "profiles": [PROFILE],
        },
        "clusters": _clusters(),
    }


def write_config(data_dir: Path) -> tuple[Path, Config]:
    doc = config_document(data_dir)
    path = data_dir / "demo-config.yaml"
    path.write_text("# Written by `kdispatch demo`.\n" + yaml.safe_dump(doc, sort_keys=False))
    return path, decode_config(doc, source=str(path))
