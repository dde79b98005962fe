"""Load scaling: the same trace against smaller clusters, or with arrivals closer together.

The Alibaba openb pod lists were sampled for bin-packing studies: replayed at their real times,
their peak demand is about 66 GPUs of the 6,212 in the node list, so no strategy ever waits.
``--capacity-scale 0.01`` shrinks every cluster (each resource, rounded down) to 1 %;
``--time-scale 0.1`` brings submissions (and user deletions) ten times closer, run times kept.
"""

from __future__ import annotations

import math

import msgspec

from reconciler.simulate.trace import Trace


def scale_capacity(trace: Trace, factor: float) -> Trace:
    if factor <= 0:
        raise ValueError(f"--capacity-scale must be positive, got {factor}")
    clusters = [
        msgspec.structs.replace(c, capacity={k: math.floor(v * factor) for k, v in c.capacity.items()})
        for c in trace.clusters
    ]
    return msgspec.structs.replace(trace, clusters=clusters)


def with_admission_latency(trace: Trace, latency_ms: int) -> Trace:
    """Every cluster admits ``latency_ms`` after a copy is created (the readers' default: 1 s)."""
    if latency_ms < 0:
        raise ValueError(f"--admission-latency must not be negative, got {latency_ms} ms")
    clusters = [msgspec.structs.replace(c, admission_latency_ms=latency_ms) for c in trace.clusters]
    return msgspec.structs.replace(trace, clusters=clusters)


def scale_time(trace: Trace, factor: float) -> Trace:
    if factor <= 0:
        raise ValueError(f"--time-scale must be positive, got {factor}")
    jobs = [
        msgspec.structs.replace(
            j,
            submit_ms=round(j.submit_ms * factor),
            delete_ms=None if j.delete_ms is None else max(round(j.delete_ms * factor), round(j.submit_ms * factor)),
        )
        for j in trace.jobs
    ]
    return msgspec.structs.replace(trace, jobs=sorted(jobs, key=lambda j: (j.submit_ms, j.name)))
