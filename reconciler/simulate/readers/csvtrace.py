"""Our own CSV trace format, for anyone else's trace (documented in docs/simulate.md).

Header row required; column order free. Required: ``job, submit_s, runtime_s``. Optional:
``count`` (pods, 1), ``cpu_m`` (per pod, millicores), ``memory_mib`` (per pod), ``gpu``
(per pod, ``nvidia.com/gpu``), ``priority`` (0), ``priority_class`` (``default``), ``pod_set``
(``main``; several rows with one job name and different pod sets make one gang), ``selector``
(``k=v;k2=v2``), ``tolerations`` (``key=value:Effect;key:Effect``), ``delete_s`` (the user
deletes the job then), ``kind`` (``Job``), ``queue`` (the team, for ``--queues``: a LocalQueue
as ``namespace/name``, a LocalQueue name, or a namespace). Seconds may be fractional.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Literal, cast

from eventlog.events import Placement, PodSet, Toleration
from reconciler.simulate.readers.csvfile import open_csv, rows
from reconciler.simulate.trace import MIB, Trace, TraceCluster, TraceError, TraceJob, sorted_trace

GPU_RESOURCE = "nvidia.com/gpu"
REQUIRED = ("job", "submit_s", "runtime_s")
OPTIONAL = (
    "count",
    "cpu_m",
    "memory_mib",
    "gpu",
    "priority",
    "priority_class",
    "pod_set",
    "selector",
    "tolerations",
    "delete_s",
    "kind",
    "queue",
)
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def default_clusters() -> list[TraceCluster]:
    capacity = {"cpu": 256_000, "memory": 2 * 1024 * 1024 * MIB, GPU_RESOURCE: 32}
    return [TraceCluster(name=f"cluster-{c}", capacity=dict(capacity)) for c in "abcd"]


class _Row:
    def __init__(self, row: dict[str, str], where: str) -> None:
        self.row = row
        self.where = where

    def text(self, column: str, default: str = "") -> str:
        return (self.row.get(column) or "").strip() or default

    def number(self, column: str, default: float | None = None) -> float:
        raw = self.text(column)
        if not raw:
            if default is None:
                raise TraceError(f"{self.where}: column {column!r} is empty")
            return default
        try:
            value = float(raw)
        except ValueError:
            raise TraceError(f"{self.where}: column {column!r}: {raw!r} is not a number") from None
        if value < 0:
            raise TraceError(f"{self.where}: column {column!r}: {raw!r} is negative")
        return value

    def ms(self, column: str) -> int:
        return round(self.number(column) * 1000)


def _selector(text: str, *, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.replace(",", ";").split(";"))):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise TraceError(f"{where}: selector {part!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


def _tolerations(text: str, *, where: str) -> list[Toleration]:
    out = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        spec, _, effect = part.rpartition(":") if ":" in part else (part, "", "")
        if effect and effect not in _EFFECTS:
            raise TraceError(f"{where}: toleration {part!r}: effect must be one of {_EFFECTS}")
        key, sep, value = spec.partition("=")
        out.append(
            Toleration(
                key=key.strip(),
                operator="Equal" if sep else "Exists",
                value=value.strip(),
                effect=cast(Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"], effect),
            )
        )
    return out


def _pod_set(r: _Row) -> PodSet:
    requests = {
        "cpu": round(r.number("cpu_m", 0)),
        "memory": round(r.number("memory_mib", 0) * MIB),
        GPU_RESOURCE: round(r.number("gpu", 0)),
    }
    count = round(r.number("count", 1))
    if count < 1:
        raise TraceError(f"{r.where}: count must be at least 1")
    return PodSet(name=r.text("pod_set", "main"), count=count, requests={k: v for k, v in requests.items() if v})


def _job(first: _Row, pod_sets: list[PodSet]) -> TraceJob:
    delete = first.text("delete_s")
    return TraceJob(
        name=first.text("job"),
        submit_ms=first.ms("submit_s"),
        runtime_ms=max(1, first.ms("runtime_s")),
        pod_sets=pod_sets,
        priority=round(first.number("priority", 0)),
        priority_class=first.text("priority_class", "default"),
        placement=Placement(
            cluster_selector=_selector(first.text("selector"), where=first.where),
            cluster_tolerations=_tolerations(first.text("tolerations"), where=first.where),
        ),
        delete_ms=first.ms("delete_s") if delete else None,
        kind=first.text("kind", "Job"),
        tenant=first.text("queue") or None,
    )


def read_csv_trace(path: Path, *, clusters: list[TraceCluster] | None = None) -> Trace:
    expected = f"a CSV trace with the columns {', '.join(REQUIRED + OPTIONAL)} (see docs/simulate.md)"
    reader = open_csv(path, expected=expected)
    groups: dict[str, tuple[_Row, list[PodSet]]] = {}
    try:
        columns = [c.strip() for c in reader.fieldnames or []]
    except csv.Error as err:
        raise TraceError(f"{path}:1: not valid CSV: {err}") from None
    missing = [c for c in REQUIRED if c not in columns]
    unknown = [c for c in columns if c not in REQUIRED + OPTIONAL]
    if missing or unknown:
        raise TraceError(
            f"{path}: missing columns {missing}, unknown columns {unknown}; "
            f"the format is {', '.join(REQUIRED + OPTIONAL)} (see docs/simulate.md)"
        )
    for line, raw in rows(reader, path):
        row = _Row({k.strip(): v for k, v in raw.items() if k}, f"{path}:{line}")
        name = row.text("job")
        if not name:
            raise TraceError(f"{row.where}: column 'job' is empty")
        pod_set = _pod_set(row)
        if name not in groups:
            groups[name] = (row, [pod_set])
            continue
        _, sets = groups[name]
        if any(ps.name == pod_set.name for ps in sets):
            raise TraceError(f"{row.where}: job {name!r} repeats pod set {pod_set.name!r}; name them with pod_set")
        sets.append(pod_set)
    jobs = [_job(first, sets) for first, sets in groups.values()]
    classes = {j.priority_class: j.priority for j in jobs}
    return sorted_trace(
        jobs=jobs,
        clusters=clusters if clusters is not None else default_clusters(),
        gpu_resource=GPU_RESOURCE,
        priority_classes=classes,
        source=str(path),
    )
