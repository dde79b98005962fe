"""PNG plots of a simulation (matplotlib, Agg backend: no display needed).

- ``wait_cdf.png``: the wait-time CDF of every profile (log x axis, waits of 0 drawn at 0.1 s);
- ``gpu_utilization.png``: GPU utilization over time per profile;
- ``queue_shares.png`` (with ``--queues``): each queue's dominant share over time, and its
  entitled share dashed, contended periods shaded, one panel per profile.
PNG metadata carries no date, so identical runs give identical files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from reconciler.simulate.session import ProfileRun

_META = {"Software": "kdispatch simulate"}


def wait_cdf(runs: list[ProfileRun], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(8, 5))
    for run in runs:
        waits = sorted(max(0.1, w / 1000) for r in run.recorder.jobs.values() if (w := r.wait_ms) is not None)
        if not waits:
            continue
        n = len(waits)
        ax.step(waits, [(i + 1) / n for i in range(n)], where="post", label=f"{run.name} (n={n})")
    ax.set_xscale("log")
    ax.set_xlabel("wait from submission to placement (s, log scale)")
    ax.set_ylabel("fraction of placed jobs")
    ax.set_title("Wait-time CDF per profile")
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, metadata=_META)
    plt.close(fig)
    return path


def utilization(runs: list[ProfileRun], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(10, 5))
    for run in runs:
        series: list[Any] = run.results.get("gpu_utilization_series") or []
        if not series:
            continue
        hours = [p[0] / 3600 for p in series]
        ax.plot(hours, [p[1] * 100 for p in series], label=f"{run.name} (mean {run.results['gpu_utilization']:.1%})")
    ax.set_xlabel("time since first submission (h)")
    ax.set_ylabel("GPU utilization (%)")
    ax.set_title("GPU utilization over time")
    ax.set_ylim(0, 100)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, metadata=_META)
    plt.close(fig)
    return path


def queue_shares(runs: list[ProfileRun], path: Path) -> Path | None:
    panels = [r for r in runs if r.results.get("queue_share_series", {}).get("points")]
    if not panels:
        return None
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 3.5 * len(panels)), squeeze=False)
    for ax, run in zip(axes[:, 0], panels, strict=True):
        series = run.results["queue_share_series"]
        names, points = series["queues"], series["points"]
        hours = [p[0] / 3600 for p in points]
        width = hours[1] - hours[0] if len(hours) > 1 else 0.0
        for h, p in zip(hours, points, strict=True):
            if p[-1] > 0:  # contended (fairness.py): darker when longer
                ax.axvspan(h, h + width, color="grey", alpha=0.4 * p[-1], linewidth=0)
        for i, name in enumerate(names):
            color = f"C{i}"
            ax.plot(hours, [p[1 + i] * 100 for p in points], color=color, label=name)
            ax.plot(hours, [p[1 + len(names) + i] * 100 for p in points], color=color, linestyle="--", alpha=0.6)
        ax.set_ylabel("dominant share (%)")
        jain = run.results.get("jain_index")
        ax.set_title(f"{run.name}: share per queue (dashed: entitled; grey: contended), Jain index {jain if jain is not None else '-'}")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper right")
    axes[-1, 0].set_xlabel("time since first submission (h)")
    fig.tight_layout()
    fig.savefig(path, metadata=_META)
    plt.close(fig)
    return path


def write_plots(out: Path, runs: list[ProfileRun]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = [wait_cdf(runs, out / "wait_cdf.png"), utilization(runs, out / "gpu_utilization.png")]
    shares = queue_shares(runs, out / "queue_shares.png")
    return written + ([shares] if shares is not None else [])
