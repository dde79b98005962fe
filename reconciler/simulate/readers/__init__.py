"""Trace readers. ``load_trace`` picks one by ``--format`` (or guesses from the file)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from reconciler.simulate.readers.alibaba import read_alibaba
from reconciler.simulate.readers.clusters import read_clusters
from reconciler.simulate.readers.csvtrace import read_csv_trace
from reconciler.simulate.readers.tiresias import read_tiresias
from reconciler.simulate.trace import Trace, TraceError

TraceFormat = Literal["alibaba", "tiresias", "csv"]
FORMATS: tuple[TraceFormat, ...] = ("alibaba", "tiresias", "csv")


def guess_format(path: Path) -> TraceFormat:
    """Alibaba pod lists and directories, Tiresias by its header, otherwise our CSV."""
    if path.is_dir() or path.name.startswith("openb_pod_list"):
        return "alibaba"
    try:
        with path.open("rb") as fh:  # a byte that is not UTF-8 is the reader's to report, with its line
            header = fh.readline().decode("utf-8-sig", "replace")
    except OSError as err:
        raise TraceError(f"{path}: {err.strerror}") from None
    if header.startswith("job_id,num_gpu,submit_time"):
        return "tiresias"
    if header.startswith("name,cpu_milli,memory_mib,num_gpu"):
        return "alibaba"
    return "csv"


def load_trace(path: Path, *, fmt: TraceFormat | None = None, clusters: Path | None = None) -> Trace:
    """Read a trace; ``clusters`` (a YAML file) replaces the format's own or default clusters."""
    fmt = fmt or guess_format(path)
    override = read_clusters(clusters) if clusters is not None else None
    if fmt == "alibaba":
        return read_alibaba(path, clusters=override)
    if fmt == "tiresias":
        return read_tiresias(path, clusters=override)
    return read_csv_trace(path, clusters=override)


__all__ = ["FORMATS", "TraceFormat", "guess_format", "load_trace"]
