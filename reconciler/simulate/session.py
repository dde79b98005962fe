"""One ``kdispatch simulate`` invocation: every profile over the same trace, then the outputs.

Results are a plain dict (``results.json``): ``{"trace": {...}, "profiles": {NAME: metrics}}``
with profiles in the order given. Nothing in it depends on the wall clock or the machine.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eventlog import events as ev
from reconciler.simulate.estimates import StartEstimates, sampling_stride
from reconciler.simulate.fairness import QueueRecorder, queue_results
from reconciler.simulate.logfile import JsonlWriter
from reconciler.simulate.metrics import placement_rows, profile_results
from reconciler.simulate.profiles import BASELINE, PolicyDefaults, label, policy_for
from reconciler.simulate.recorder import Recorder
from reconciler.simulate.report import vs_baseline
from reconciler.simulate.runner import (
    EPOCH_MS,
    CoreApi,
    Observer,
    RunSettings,
    VirtualRun,
    WorkerModel,
    sim_worker,
)
from reconciler.simulate.trace import Trace, TraceCluster
from reconciler.simulate.wasted import WastedPlacements


@dataclass
class ProfileRun:
    name: str
    results: dict[str, Any]
    placements: list[dict[str, Any]]
    recorder: Recorder
    queues: QueueRecorder | None = None  # with --queues


def run_profile(
    trace: Trace,
    *,
    profile: ev.Profile,
    settings: PolicyDefaults,
    core: CoreApi,
    make_worker: Callable[[TraceCluster], WorkerModel] = sim_worker,
    run_settings: RunSettings | None = None,
    progress: Callable[[int], None] | None = None,
    log_path: Path | None = None,
    queues: ev.QueuesConfigured | None = None,
    start_estimates: bool = False,
    name: str | None = None,
) -> ProfileRun:
    """``name``: the run's key in the results (the profile's name unless given)."""
    recorder = Recorder(gpu_resource=trace.gpu_resource)
    wasted = WastedPlacements(round_timeout_ms=profile.round_timeout_ms)
    estimates = StartEstimates(every=sampling_stride(len(trace.jobs))) if start_estimates else None
    observers: list[Observer] = [recorder, wasted]
    if estimates is not None:
        observers.append(estimates)
    queue_recorder = None
    if queues is not None:
        names = sorted({r for c in trace.clusters for r in c.capacity})
        queue_recorder = QueueRecorder(capacity={r: trace.total_capacity(r) for r in names})
        observers.append(queue_recorder)
    writer = JsonlWriter(log_path) if log_path is not None else None
    if writer is not None:
        observers.append(writer)
    run = VirtualRun(
        trace,
        policy=policy_for(profile, settings=settings, priority_classes=trace.priority_classes),
        profile_name=profile.name,
        core=estimates.wrap(core) if estimates is not None else core,
        make_worker=make_worker,
        observers=observers,
        settings=run_settings or RunSettings(),
        progress=progress,
        queues=queues,
    )
    try:
        run.run()
    finally:
        if writer is not None:
            writer.close()
    results = profile_results(
        recorder,
        gpu_capacity=trace.total_capacity(trace.gpu_resource),
        clusters=len(trace.clusters),
    )
    strategy = profile.strategy
    results["strategy"] = {
        "type": strategy.type,
        "k": strategy.k,
        "step_size": strategy.step_size,
        "nominated_hold": strategy.nominated_hold or "all",
    }
    results["batches"] = run.batches
    results["wasted_placements"] = wasted.results()
    if estimates is not None:
        results["start_estimate"] = estimates.results()
    if queue_recorder is not None:
        ends = [r.finished_ms for r in recorder.jobs.values() if r.finished_ms is not None]
        results.update(queue_results(queue_recorder, end_ms=max(ends) if ends else recorder.last_ms))
    return ProfileRun(
        name=name or profile.name,
        results=results,
        placements=placement_rows(recorder, profile=name or profile.name, origin_ms=EPOCH_MS),
        recorder=recorder,
        queues=queue_recorder,
    )


def gpus_text(trace: dict[str, Any]) -> str:
    """The trace's GPU capacity (``trace_summary``) in GPUs: ``52.8 GPUs``, ``128 GPUs``."""
    if trace["gpu_resource"].endswith("-milli"):
        return f"{trace['gpu_capacity'] / 1000:,.1f} GPUs"
    return f"{trace['gpu_capacity']:,d} GPUs"


def settings_text(settings: dict[str, Any]) -> str:
    """How the trace was run, as a phrase: scales, admission latency, limit."""
    parts = [f"capacity scale {settings['capacity_scale']:g}"]
    if settings.get("time_scale", 1.0) != 1.0:
        parts.append(f"time scale {settings['time_scale']:g}")
    latencies = settings.get("admission_latency_ms") or []
    if latencies:
        parts.append("admission latency " + "/".join(f"{ms / 1000:g} s" for ms in latencies))
    if settings.get("limit") is not None:
        parts.append(f"first {settings['limit']:,d} jobs")
    if settings.get("workers") is not None:
        parts.append(
            f"{settings['nodes']:,d} nodes in {settings['workers']:,d} workers, "
            f"capacity model {'/'.join(settings['capacity_models'])}"
        )
    return ", ".join(parts)


def trace_summary(trace: Trace) -> dict[str, Any]:
    return {
        "source": Path(trace.source).name,
        "jobs": len(trace.jobs),
        "clusters": {c.name: dict(sorted(c.capacity.items())) for c in trace.clusters},
        "gpu_resource": trace.gpu_resource,
        "gpu_capacity": trace.total_capacity(trace.gpu_resource),
        "priority_classes": trace.priority_classes,
    }


def baseline_of(names: list[str]) -> str | None:
    """The profile the others are compared with: ``multikueue`` when it runs, else the first."""
    if BASELINE in names:
        return BASELINE
    return names[0] if names else None


def results_document(trace: Trace, runs: list[ProfileRun], *, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """``settings``: how the trace was run (scales, limit), recorded so a table can be redone."""
    profiles = {r.name: {"label": label(r.name), **r.results} for r in runs}
    baseline = baseline_of(list(profiles))
    if baseline is not None:
        for name, ratios in vs_baseline(profiles, baseline).items():
            profiles[name]["vs_baseline"] = ratios
    doc: dict[str, Any] = {"trace": trace_summary(trace)}
    if settings is not None:
        doc["settings"] = settings
    doc["baseline"] = baseline
    doc["profiles"] = profiles
    return doc


def encode_results(doc: dict[str, Any]) -> bytes:
    return (json.dumps(doc, indent=2, sort_keys=False, allow_nan=False) + "\n").encode()


def write_outputs(out: Path, *, doc: dict[str, Any], runs: list[ProfileRun]) -> list[Path]:
    """results.json and placements.jsonl (the PNGs are written by ``plots``)."""
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.json"
    results.write_bytes(encode_results(doc))
    placements = out / "placements.jsonl"
    with placements.open("w") as fh:
        for run in runs:
            for row in run.placements:
                fh.write(json.dumps(row, separators=(",", ":")) + "\n")
    return [results, placements]
