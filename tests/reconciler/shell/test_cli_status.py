"""``kdispatch status`` and ``kdispatch queue`` through the real entry point, on the recorded demo
log: the tables, ``-o json|yaml``, ``--until``, and errors a person can act on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "demo-4e2c1d6.jsonl.gz"
KDISPATCH = [sys.executable, "-m", "reconciler"]


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KDISPATCH, *argv, "--file", str(FIXTURE), "--quiet"], capture_output=True, text=True, timeout=120)


def test_status_prints_queues_and_clusters_as_tables_and_as_json() -> None:
    table = run("status", "--until", "1500")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith(f"file {FIXTURE}, log seq 1500")
    queue_row = next(line for line in lines if line.startswith("default "))
    assert queue_row.split()[1:5] == ["47", "22", "0", "78"]  # pending, admitted, suspended, finished
    east = next(line for line in lines if line.startswith("east-a100 "))
    assert east.split()[1] == "Lost"
    doc = json.loads(run("status", "--until", "1500", "-o", "json").stdout)
    assert doc["seq"] == 1500 and doc["queues"][0]["pending"] == 47
    assert {c["name"]: c["health"] for c in doc["clusters"]}["east-a100"] == "Lost"


def test_queue_lists_waiting_jobs_in_dispatch_order_with_their_reason() -> None:
    out = run("queue", "default", "--until", "1500", "-o", "yaml")
    assert out.returncode == 0, out.stderr
    items = yaml.safe_load(out.stdout)["items"]
    assert len(items) == 47 and [j["position"] for j in items] == list(range(1, 48))
    # Dispatch order: priority first, then submission order.
    order = [(-j["priority"], j["submitted_seq"]) for j in items]
    assert order == sorted(order)
    assert all(j["reason"] for j in items)
    table = run("queue", "--until", "1500")
    assert "47 waiting in every queue" in table.stdout
    first = table.stdout.splitlines()[3]
    assert first.split()[:3] == ["1", "default", items[0]["key"]]


def test_at_the_end_of_the_demo_nothing_waits() -> None:
    out = run("queue")
    assert out.returncode == 0 and ": 0 waiting in every queue" in out.stdout


def test_an_unknown_queue_is_named_with_the_known_ones() -> None:
    out = run("queue", "defualt")
    assert out.returncode == 1
    assert "no queue 'defualt'" in out.stderr and "(queues: default)" in out.stderr and "did you mean: default?" in out.stderr


def test_a_bad_output_format_is_refused_while_parsing() -> None:
    out = run("status", "-o", "xml")
    assert out.returncode == 2 and "invalid choice: 'xml'" in out.stderr
