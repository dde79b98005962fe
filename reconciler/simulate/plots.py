"""PNG plots of a simulation (matplotlib, Agg backend: no display needed).

- ``wait_cdf.png``: the wait-time CDF of every profile (log x axis, waits of 0 drawn at 0.1 s);
- ``gpu_utilization.png``: GPU utilization over time per profile;
- ``queue_shares.png`` (with ``--queues``): each queue's dominant share over time, and its
  entitled share dashed, contended periods shaded, one panel per profile.
Each title says what was run (trace, jobs, capacity and time scale), so a plot read on its own
is not mistaken for another run's. PNG metadata carries no date, so identical runs give
identical files.
"""

from __future__ import annotations

import bisect
import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from reconciler.simulate.profiles import BASELINE, label
from reconciler.simulate.session import ProfileRun, gpus_text, settings_text

_META = {"Software": "kdispatch simulate"}


def run_caption(doc: dict[str, Any]) -> str:
    """What was run, from results.json: trace file, jobs, capacity (and arrival) scale, GPUs."""
    t = doc["trace"]
    run = f"{t['source']}, {t['jobs']:,d} jobs, {gpus_text(t)}"
    return run + (f"; {settings_text(doc['settings'])}" if "settings" in doc else "")


def _title(what: str, caption: str, width: int = 95) -> str:
    """The title, then the caption broken between its comma-separated parts, never inside one
    (``1 s`` stays on one line)."""
    lines: list[str] = []
    for part in caption.split(", ") if caption else []:
        if lines and len(lines[-1]) + 2 + len(part) <= width:
            lines[-1] += ", " + part
        else:
            lines.append(part)
    return "\n".join([what, *lines])


def _style(name: str) -> dict[str, Any]:
    """The baseline dashed, black and on top: a profile that decides as it does (kdispatch's
    AllAtOnce) would otherwise hide it."""
    return {"color": "black", "linestyle": "--", "linewidth": 1.2, "zorder": 5} if name == BASELINE else {}


def wait_cdf(runs: list[ProfileRun], path: Path, *, caption: str = "") -> Path:
    fig, ax = plt.subplots(figsize=(8, 5))
    floor = 1.0  # the smallest share of jobs placed at a profile's shortest wait
    for run in runs:
        waits = sorted(max(0.1, w / 1000) for r in run.recorder.jobs.values() if (w := r.wait_ms) is not None)
        if not waits:
            continue
        n = len(waits)
        mean = sum(waits) / n
        floor = min(floor, bisect.bisect_right(waits, waits[0]) / n)
        ax.step(
            waits,
            [(i + 1) / n for i in range(n)],
            where="post",
            label=f"{label(run.name)} (n={n:,d}, mean {mean:,.0f} s)",
            **_style(run.name),
        )
    ax.set_xscale("log")
    ax.set_xlabel("wait from submission to placement (s, log scale)")
    # Most jobs are often placed at once: start the axis just below that step, where the
    # profiles differ, instead of a vertical line from 0 and a crowded top.
    bottom = max(0.0, math.floor((floor - 0.01) * 100) / 100)
    ax.set_ylim(bottom, 1.002)
    ax.set_ylabel("fraction of placed jobs" + (f" (axis from {bottom:.2f})" if bottom > 0 else ""))
    ax.set_title(_title("Wait-time CDF per profile", caption), fontsize=10)
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
        ax.plot(
            hours,
            [p[1] * 100 for p in series],
            label=f"{label(run.name)} (mean {run.results['gpu_utilization']:.1%})",
            **_style(run.name),
        )
    ax.set_xlabel("time since first submission (h)")
    ax.set_ylabel("GPU utilization (%)")
    ax.set_title(_title("GPU utilization over time", caption), fontsize=10)
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


def write_plots(out: Path, runs: list[ProfileRun], *, doc: dict[str, Any] | None = None) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    caption = run_caption(doc) if doc is not None else ""
    written = [
        wait_cdf(runs, out / "wait_cdf.png", caption=caption),
        utilization(runs, out / "gpu_utilization.png", caption=caption),
    ]
    shares = queue_shares(runs, out / "queue_shares.png")
    return written + ([shares] if shares is not None else [])
