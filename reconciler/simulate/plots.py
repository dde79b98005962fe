"""PNG plots of a simulation (matplotlib, Agg backend: no display needed).

- ``wait_cdf.png``: the wait-time CDF of every profile (log x axis, waits of 0 drawn at 0.1 s);
- ``gpu_utilization.png``: GPU utilization over time per profile.
Each title says what was run (trace, jobs, capacity and time scale), so a plot read on its own
is not mistaken for another run's. PNG metadata carries no date, so identical runs give
identical files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from reconciler.simulate.profiles import label
from reconciler.simulate.session import ProfileRun, gpus_text, settings_text

_META = {"Software": "kdispatch simulate"}


def run_caption(doc: dict[str, Any]) -> str:
    """What was run, from results.json: trace file, jobs, capacity (and arrival) scale, GPUs."""
    t = doc["trace"]
    run = f"{t['source']}, {t['jobs']:,d} jobs, {gpus_text(t)}"
    return run + (f"; {settings_text(doc['settings'])}" if "settings" in doc else "")


def wait_cdf(runs: list[ProfileRun], path: Path, *, caption: str = "") -> Path:
    fig, ax = plt.subplots(figsize=(8, 5))
    for run in runs:
        waits = sorted(max(0.1, w / 1000) for r in run.recorder.jobs.values() if (w := r.wait_ms) is not None)
        if not waits:
            continue
        n = len(waits)
        mean = sum(waits) / n
        ax.step(
            waits, [(i + 1) / n for i in range(n)], where="post", label=f"{label(run.name)} (n={n:,d}, mean {mean:,.0f} s)"
        )
    ax.set_xscale("log")
    ax.set_xlabel("wait from submission to placement (s, log scale)")
    ax.set_ylabel("fraction of placed jobs")
    ax.set_title("Wait-time CDF per profile" + (f"\n{caption}" if caption else ""), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, metadata=_META)
    plt.close(fig)
    return path


def utilization(runs: list[ProfileRun], path: Path, *, caption: str = "") -> Path:
    fig, ax = plt.subplots(figsize=(10, 5))
    for run in runs:
        series: list[Any] = run.results.get("gpu_utilization_series") or []
        if not series:
            continue
        hours = [p[0] / 3600 for p in series]
        ax.plot(hours, [p[1] * 100 for p in series], label=f"{label(run.name)} (mean {run.results['gpu_utilization']:.1%})")
    ax.set_xlabel("time since first submission (h)")
    ax.set_ylabel("GPU utilization (%)")
    ax.set_title("GPU utilization over time" + (f"\n{caption}" if caption else ""), fontsize=10)
    ax.set_ylim(0, 100)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path, metadata=_META)
    plt.close(fig)
    return path


def write_plots(out: Path, runs: list[ProfileRun], *, doc: dict[str, Any] | None = None) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    caption = run_caption(doc) if doc is not None else ""
    return [
        wait_cdf(runs, out / "wait_cdf.png", caption=caption),
        utilization(runs, out / "gpu_utilization.png", caption=caption),
    ]
