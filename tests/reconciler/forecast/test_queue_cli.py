"""``kdispatch queue``'s expected start, through the real entry point on the recorded demo log
(at seq 1500: 47 jobs wait, east-a100 is Lost)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "demo-4e2c1d6.jsonl.gz"


def queue(*argv: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        sys.executable,
        "-m",
        "reconciler",
        "queue",
        "--until",
        "1500",
        *argv,
        "--file",
        str(FIXTURE),
        "--quiet",
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def test_each_waiting_job_that_can_start_gets_a_time_and_a_ready_cluster() -> None:
    out = queue("-o", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    items = doc["items"]
    estimated = [j for j in items if j["expected_start_ms"] is not None]
    assert len(estimated) > 30
    assert all(j["expected_start_ms"] >= doc["at_ms"] for j in estimated)
    assert {j["expected_cluster"] for j in estimated} <= {"west-h100", "north-spot", "central-cpu"}
    # Jobs only the Lost cluster could take (region=east) never start in the forecast.
    east_only = [j for j in items if "label region=east missing" in j["reason"]]
    assert east_only and all(
        j["expected_start_ms"] is None and j["expected_cluster"] is None for j in east_only
    )
    # Within one priority and shape, a job later in dispatch order does not start earlier.
    fillers = [j["expected_start_ms"] for j in items if j["name"].startswith("filler-")]
    assert fillers == sorted(fillers)


def test_the_table_has_an_expected_start_column_and_the_limit_caps_the_work() -> None:
    table = queue("--estimate-limit", "3")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert "EXPECTED START" in lines[2]
    rows = lines[3:]
    assert [(" on " in row.split("Unschedulable", 1)[1]) for row in rows[:4]] == [True, True, True, False]
    doc = json.loads(queue("--estimate-limit", "0", "-o", "json").stdout)
    assert all(j["expected_start_ms"] is None for j in doc["items"])
