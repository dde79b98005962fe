"""The Tiresias simulator's job trace (SymbioticLab/Tiresias, ``simulator/*_job.csv``).

Columns ``job_id, num_gpu, submit_time, iterations, model_name, duration, interval`` (seconds).
Each job is a gang of ``num_gpu`` one-GPU workers (1 CPU, 2 GiB each). Without ``--clusters``
the cluster is the ``n32g4`` spec (32 nodes x 4 GPUs, 40 CPUs, 256 GiB each) split into four
clusters of eight nodes, so there is something to choose between.
"""

from __future__ import annotations

from pathlib import Path

from eventlog.events import PodSet
from reconciler.simulate.readers.csvfile import missing_columns, open_csv, rows
from reconciler.simulate.trace import MIB, Trace, TraceCluster, TraceError, TraceJob, sorted_trace

GPU_RESOURCE = "nvidia.com/gpu"
_COLUMNS = ("job_id", "num_gpu", "submit_time", "duration")
_EXPECTED = "a Tiresias job trace: CSV with the columns job_id, num_gpu, submit_time, iterations, model_name, duration, interval"
_WORKER = {"cpu": 1000, "memory": 2048 * MIB, GPU_RESOURCE: 1}


def default_clusters(*, count: int = 4, nodes: int = 8) -> list[TraceCluster]:
    per_node = {"cpu": 40_000, "memory": 256 * 1024 * MIB, GPU_RESOURCE: 4}
    return [
        TraceCluster(
            name=f"tiresias-{i}",
            capacity={k: v * nodes for k, v in sorted(per_node.items())},
            labels={"kdispatch.io/nodes": str(nodes)},
        )
        for i in range(count)
    ]


def _number(raw: str | None, *, where: str, column: str) -> float:
    try:
        return float((raw or "").strip())
    except ValueError:
        raise TraceError(f"{where}: column {column!r}: {raw!r} is not a number") from None


def read_tiresias(path: Path, *, clusters: list[TraceCluster] | None = None) -> Trace:
    jobs: list[TraceJob] = []
    reader = open_csv(path, expected=_EXPECTED)
    missing_columns(reader, path, _COLUMNS, expected=_EXPECTED)
    for line, row in rows(reader, path):
        where = f"{path}:{line}"
        gpus = int(_number(row["num_gpu"], where=where, column="num_gpu"))
        if gpus < 1:
            raise TraceError(f"{where}: num_gpu must be at least 1, got {gpus}")
        jobs.append(
            TraceJob(
                name=f"tiresias-{row['job_id'].strip()}",
                submit_ms=round(_number(row["submit_time"], where=where, column="submit_time") * 1000),
                runtime_ms=max(1, round(_number(row["duration"], where=where, column="duration") * 1000)),
                pod_sets=[PodSet(name="worker", count=gpus, requests=dict(_WORKER))],
            )
        )
    return sorted_trace(
        jobs=jobs,
        clusters=clusters if clusters is not None else default_clusters(),
        gpu_resource=GPU_RESOURCE,
        source=str(path),
    )
