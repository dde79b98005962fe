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

import yaml

from eventlog.kube.quantity import QuantityError, parse_resources
from reconciler.config import ConfigError, decode_config, parse_duration_ms
from reconciler.simulate.trace import TraceCluster, TraceError


def clusters_from_config(raw: Any, *, source: str) -> list[TraceCluster]:
    if isinstance(raw, list):
        raw = {"clusters": raw}
    try:
        config = decode_config(raw, source=source)
    except ConfigError as err:
        raise TraceError(str(err)) from None
    result = []
    for i, cluster in enumerate(config.clusters):
        where = f"{source}: $.clusters[{i}]"
        if cluster.simulated is None or not cluster.simulated.capacity:
            raise TraceError(f"{where} ({cluster.name}): simulated.capacity is required to simulate it")
        try:
            capacity = parse_resources(cluster.simulated.capacity)
            latency = parse_duration_ms(cluster.simulated.admission_latency)
        except (QuantityError, ConfigError) as err:
            raise TraceError(f"{where}.simulated: {err}") from None
        result.append(
            TraceCluster(
                name=cluster.name,
                capacity=capacity,
                labels=dict(cluster.labels),
                taints=list(cluster.taints),
                admission_latency_ms=latency,
            )
        )
    if not result:
        raise TraceError(f"{source}: no clusters")
    return result


def read_clusters(path: Path) -> list[TraceCluster]:
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise TraceError(f"{path}: {err}") from None
    return clusters_from_config(raw, source=str(path))
