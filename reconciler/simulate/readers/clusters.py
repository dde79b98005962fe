"""Cluster files for ``--clusters``: the ``clusters:`` section of the kdispatch config file.

Either a whole config file or just the list; every cluster needs ``simulated.capacity``::

    clusters:
      - name: gpu-east
        labels: {region: east}
        taints: [{key: gpu, value: h100, effect: NoSchedule}]
        simulated: {capacity: {cpu: "512", memory: 4Ti, nvidia.com/gpu: 64}, admissionLatency: 2s}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from reconciler.config import ConfigError, decode_config, read_yaml
from reconciler.simulate.trace import TraceCluster, TraceError


def clusters_from_config(raw: Any, *, source: str, text: str | None = None) -> list[TraceCluster]:
    """``text``: the file's text, for the line of an error."""
    if isinstance(raw, list):
        raw, text = {"clusters": raw}, None  # the paths no longer match the file's
    try:
        config = decode_config(raw, source=source, text=text)
    except ConfigError as err:
        raise TraceError(str(err)) from None
    result = []
    for i, cluster in enumerate(config.clusters):
        where = f"{source}: $.clusters[{i}]"
        if cluster.simulated is None or not cluster.simulated.capacity:
            raise TraceError(f"{where} ({cluster.name}): simulated.capacity is required to simulate it")
        result.append(
            TraceCluster(
                name=cluster.name,
                capacity=dict(sorted(cluster.simulated.capacity.items())),
                labels=dict(cluster.labels),
                taints=list(cluster.taints),
                admission_latency_ms=cluster.simulated.admission_latency_ms,
            )
        )
    if not result:
        raise TraceError(f"{source}: no clusters")
    return result


CLUSTERS_FILE = "a list of clusters, or a config file with clusters:, each with simulated.capacity"


def read_clusters(path: Path) -> list[TraceCluster]:
    try:
        raw, text = read_yaml(path, expected=CLUSTERS_FILE)
    except ConfigError as err:
        raise TraceError(str(err)) from None
    if not isinstance(raw, list | dict):
        raise TraceError(f"{path}: expected {CLUSTERS_FILE}; found the single value {raw!r}")
    return clusters_from_config(raw, source=str(path), text=text)
