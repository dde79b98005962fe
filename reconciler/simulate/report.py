"""The side-by-side table printed on stdout."""

from __future__ import annotations

from typing import Any

_COLUMNS: list[tuple[str, str, str]] = [
    # (header, key, format)
    ("jobs", "jobs", "d"),
    ("placed", "placed", "d"),
    ("wait p50 s", "wait_p50_s", ".1f"),
    ("p95 s", "wait_p95_s", ".1f"),
    ("p99 s", "wait_p99_s", ".1f"),
    ("copies/job", "remote_copies_per_job", ".2f"),
    ("/attempt", "remote_copies_per_attempt", ".2f"),
    ("preempt", "preemptions", "d"),
    ("re-placed", "replaced", "d"),
    ("GPU util", "gpu_utilization", ".1%"),
    ("makespan h", "makespan_s", "h"),
    ("unfinished", "unfinished", "d"),
]


def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return "-"
    if fmt == "h":
        return f"{value / 3600:.1f}"
    return format(value, fmt)


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
        rows.append([name] + [_cell(res.get(key), fmt) for _, key, fmt in _COLUMNS])
    return text_table(rows)


def class_table(profiles: dict[str, dict[str, Any]]) -> str:
    """Wait percentiles per priority class, one row per (profile, class)."""
    rows = [["profile", "class", "jobs", "placed", "wait p50 s", "p95 s", "p99 s"]]
    for name, res in profiles.items():
        for cls, st in res.get("by_priority_class", {}).items():
            rows.append(
                [name, cls, str(st["jobs"]), str(st["placed"])]
                + [_cell(st.get(k), ".1f") for k in ("wait_p50_s", "wait_p95_s", "wait_p99_s")]
            )
    return text_table(rows)
