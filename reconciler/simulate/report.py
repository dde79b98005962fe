"""The tables printed on stdout: waits and costs, the ratios to the baseline, where jobs ended."""

from __future__ import annotations

from typing import Any

from reconciler.simulate.metrics import OUTCOMES
from reconciler.simulate.profiles import label

_COLUMNS: list[tuple[str, str, str]] = [
    # (header, key, format)
    ("jobs", "jobs", ",d"),
    ("placed", "placed", ",d"),
    ("wait mean s", "wait_mean_s", ",.1f"),
    ("p50 s", "wait_p50_s", ",.1f"),
    ("p90 s", "wait_p90_s", ",.1f"),
    ("p95 s", "wait_p95_s", ",.1f"),
    ("p99 s", "wait_p99_s", ",.1f"),
    ("waited >1s", "waited_over_1s_pct", "%"),
    (">60s", "waited_over_60s_pct", "%"),
    ("copies/job", "remote_copies_per_job", ".2f"),
    ("/attempt", "remote_copies_per_attempt", ".2f"),
    ("preemptions", "preemptions", ",d"),
    ("re-placed", "replaced", ",d"),
    ("GPU util", "gpu_utilization", ".1%"),
    ("makespan h", "makespan_s", "h"),
]

# (header, key) of the ratios to the baseline (``vs_baseline`` in results.json).
RATIOS: list[tuple[str, str]] = [
    ("wait mean", "wait_mean_s"),
    ("p50", "wait_p50_s"),
    ("p90", "wait_p90_s"),
    ("p95", "wait_p95_s"),
    ("p99", "wait_p99_s"),
    ("copies/job", "remote_copies_per_job"),
    ("preemptions", "preemptions"),
    ("makespan", "makespan_s"),
]

_OUTCOME_HEADERS = {
    "finished": "finished",
    "deleted_before_placement": "deleted unplaced",
    "deleted_after_placement": "deleted placed",
    "running_at_end": "running at end",
    "waiting_at_end_after_placement": "requeued at end",
    "never_placed": "never placed",
}


def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    if fmt == "h":
        return f"{value / 3600:,.1f}"
    if fmt == "%":  # already a percentage
        return f"{value:.1f}%"
    return format(value, fmt)


def ratio(value: Any, base: Any) -> float | None:
    """value / base; None when either is missing or the base is 0 (1.0 when both are 0)."""
    if not isinstance(value, int | float) or not isinstance(base, int | float):
        return None
    if base == 0:
        return 1.0 if value == 0 else None
    return round(value / base, 3)


def vs_baseline(profiles: dict[str, dict[str, Any]], baseline: str) -> dict[str, dict[str, float | None]]:
    """Per profile, each ``RATIOS`` key as a ratio to the baseline profile's."""
    base = profiles[baseline]
    return {name: {key: ratio(res.get(key), base.get(key)) for _, key in RATIOS} for name, res in profiles.items()}


TIMES = "\N{MULTIPLICATION SIGN}"


def times(value: float | None) -> str:
    """A ratio as ``0.02`` and the multiplication sign (not ``0.02x``: ``0x2`` reads as hexadecimal)."""
    return "-" if value is None else f"{value:,.2f}{TIMES}"


def text_table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells))
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def profiles_table(profiles: dict[str, dict[str, Any]]) -> str:
    rows = [["profile"] + [h for h, _, _ in _COLUMNS]]
    for name, res in profiles.items():
        rows.append([label(name)] + [_cell(res.get(key), fmt) for _, key, fmt in _COLUMNS])
    return text_table(rows)


def ratio_table(profiles: dict[str, dict[str, Any]], baseline: str) -> str:
    """Every profile against the baseline (the baseline's own row is all 1.00)."""
    ratios = vs_baseline(profiles, baseline)
    rows = [[f"vs {label(baseline)}"] + [h for h, _ in RATIOS]]
    for name in profiles:
        rows.append([label(name)] + [times(ratios[name][key]) for _, key in RATIOS])
    return text_table(rows)


def outcomes_table(profiles: dict[str, dict[str, Any]]) -> str:
    """Where every job ended: one bucket each, adding up to the job count."""
    rows = [["profile", "jobs"] + [_OUTCOME_HEADERS[k] for k in OUTCOMES]]
    for name, res in profiles.items():
        final = res.get("outcomes", {})
        rows.append([label(name), f"{res['jobs']:,d}"] + [f"{final.get(k, 0):,d}" for k in OUTCOMES])
    return text_table(rows)


def class_table(profiles: dict[str, dict[str, Any]]) -> str:
    """Waits per priority class, one row per (profile, class)."""
    keys = ("wait_mean_s", "wait_p50_s", "wait_p95_s", "wait_p99_s")
    rows = [["profile", "class", "jobs", "placed", "wait mean s", "p50 s", "p95 s", "p99 s", "waited >1s"]]
    for name, res in profiles.items():
        for cls, st in res.get("by_priority_class", {}).items():
            rows.append(
                [label(name), cls, f"{st['jobs']:,d}", f"{st['placed']:,d}"]
                + [_cell(st.get(k), ",.1f") for k in keys]
                + [_cell(st.get("waited_over_1s_pct"), "%")]
            )
    return text_table(rows)


# The floor of issue #15: with node facts, at most this share of the jobs sent to a worker wait
# there past the round timeout, and the p95 wait is no higher than without them.
FLOOR_WASTED_PCT = 1.0


def wasted_table(profiles: dict[str, dict[str, Any]]) -> str:
    """Wasted placements per run (``reconciler.simulate.wasted``), beside the p95 wait."""
    rows = [["profile", "jobs sent", "wasted jobs", "share", "wasted copies", "p95 wait s"]]
    for name, res in profiles.items():
        w = res.get("wasted_placements", {})
        rows.append(
            [
                label(name),
                f"{w.get('jobs_sent', 0):,d}",
                f"{w.get('count', 0):,d}",
                _cell(w.get("share_pct"), "%"),
                f"{w.get('copies', 0):,d}",
                _cell(res.get("wait_p95_s"), ",.1f"),
            ]
        )
    return text_table(rows)


def floor_lines(profiles: dict[str, dict[str, Any]]) -> list[str]:
    """Per profile run under both capacity models (``NAME@totals``, ``NAME@nodes``): is the
    floor met? Wasted placements at most ``FLOOR_WASTED_PCT`` with node facts, p95 wait not
    higher than with totals only."""
    lines = []
    for name, nodes in profiles.items():
        base, _, model = name.partition("@")
        totals = profiles.get(f"{base}@totals")
        if model != "nodes" or totals is None:
            continue
        share = nodes["wasted_placements"]["share_pct"] or 0.0
        before = totals["wasted_placements"]["share_pct"] or 0.0
        p95, p95_before = nodes.get("wait_p95_s"), totals.get("wait_p95_s")
        ok = share <= FLOOR_WASTED_PCT and p95 is not None and p95_before is not None and p95 <= p95_before
        lines.append(
            f"floor {label(base)}: wasted placements {share:.1f}% with node facts (<= {FLOOR_WASTED_PCT:g}%; "
            f"{before:.1f}% with totals only), p95 wait {_cell(p95, ',.1f')} s (totals only: "
            f"{_cell(p95_before, ',.1f')} s, must not rise): {'MET' if ok else 'NOT MET'}"
        )
    return lines
