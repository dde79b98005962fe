"""The demo, shortened, through its real entry point (``kdispatch demo``), then the commands it
tells a person to run, on the log it left behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

KDISPATCH = [sys.executable, "-m", "reconciler"]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    data_dir = tmp_path_factory.mktemp("demo") / "data"
    # A previous demo's data dir: this run must keep it aside, not overwrite it.
    data_dir.mkdir()
    (data_dir / "demo-config.yaml").write_text("# Written by `kdispatch demo`.\n")
    (data_dir / "demo-summary.json").write_text('{"previous": true}\n')
    proc = subprocess.run(
        [*KDISPATCH, "demo", "--fast", "--jobs", "40", "--data-dir", str(data_dir), "--quiet"],
        capture_output=True,
        text=True,
        timeout=150,
    )
    return proc, data_dir


def test_demo_succeeds_and_its_summary_holds(demo_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, data_dir = demo_run
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-3000:]}"
    summary = json.loads((data_dir / "demo-summary.json").read_text())
    assert summary["ok"] and summary["problems"] == []
    # Every job reached a final state.
    assert summary["submitted"] == summary["jobs"] >= 40
    assert set(summary["phases"]) <= {"Finished", "Deleted"}
    assert sum(summary["phases"].values()) == summary["jobs"]
    # The silent cluster was lost and its jobs requeued; every one was placed again, or its copy
    # there turned out to have finished while the cluster was unreachable (reported on return).
    lost = summary["clusters"][summary["silent_cluster"]]
    assert lost["lost"] >= 1 and lost["requeued_by_loss"] >= 1 and lost["replaced_after_loss"] >= 1
    assert lost["replaced_after_loss"] + lost["finished_while_lost"] == lost["requeued_by_loss"]
    # The burst preempted something.
    assert summary["preemptions"] >= 1
    assert summary["replay"]["mismatch"] is None and summary["replay"]["verified_batches"] > 0
    # The printed summary: per-cluster and per-class tables and the commands to look further.
    out = proc.stdout
    assert "Per cluster:" in out and "Per job class" in out and "re-placed after loss" in out
    # Hints name the program as it was run (here `python -m reconciler`), not a `kdispatch` that
    # may not be on PATH, and no `nats` CLI (nothing installs one).
    assert f"-m reconciler replay --verify --data-dir {data_dir.absolute()}" in out
    assert "\n  nats " not in out
    assert "demo OK" in out


def test_a_second_demo_keeps_the_first_ones_data_dir_aside(
    demo_run: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    proc, data_dir = demo_run
    kept = [p for p in data_dir.parent.iterdir() if p.name.startswith("data.prev-")]
    assert len(kept) == 1, list(data_dir.parent.iterdir())
    assert json.loads((kept[0] / "demo-summary.json").read_text()) == {"previous": True}
    assert f"the previous demo's data dir is kept as {kept[0]}" in proc.stdout


def test_replay_verify_passes_on_the_demo_log(demo_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, data_dir = demo_run
    assert proc.returncode == 0
    replayed = subprocess.run(
        [*KDISPATCH, "replay", "--verify", "--data-dir", str(data_dir)], capture_output=True, text=True, timeout=60
    )
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr[-2000:]


def test_explain_works_on_the_job_the_demo_points_at(demo_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, data_dir = demo_run
    assert proc.returncode == 0
    job = json.loads((data_dir / "demo-summary.json").read_text())["explain_job"]
    explained = subprocess.run(
        [*KDISPATCH, "explain", job, "--data-dir", str(data_dir)], capture_output=True, text=True, timeout=60
    )
    assert explained.returncode == 0, explained.stdout + explained.stderr[-2000:]
    assert job in explained.stdout


def test_demo_refuses_a_data_dir_it_did_not_make(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    proc = subprocess.run(
        [*KDISPATCH, "demo", "--fast", "--jobs", "40", "--data-dir", str(tmp_path), "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "was not made by `kdispatch demo`" in proc.stderr
    assert (tmp_path / "precious.txt").read_text() == "keep me"


def test_status_and_queue_read_the_demo_log(demo_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, data_dir = demo_run
    assert proc.returncode == 0
    summary = json.loads((data_dir / "demo-summary.json").read_text())
    status = subprocess.run(
        [*KDISPATCH, "status", "--data-dir", str(data_dir), "-o", "json"], capture_output=True, text=True, timeout=60
    )
    assert status.returncode == 0, status.stderr[-2000:]
    doc = json.loads(status.stdout)
    [queue] = doc["queues"]
    assert queue["name"] == "default" and queue["finished"] == summary["phases"].get("Finished", 0)
    assert queue["pending"] == queue["admitted"] == 0
    assert {c["name"]: c["health"] for c in doc["clusters"]} == {n: c["health"] for n, c in summary["clusters"].items()}
    table = subprocess.run([*KDISPATCH, "status", "--data-dir", str(data_dir)], capture_output=True, text=True, timeout=60)
    assert table.returncode == 0 and "QUEUE" in table.stdout and "east-a100" in table.stdout
    # Midway, jobs waited: `queue --until` lists them in dispatch order.
    queued = subprocess.run(
        [*KDISPATCH, "queue", "default", "--data-dir", str(data_dir), "--until", "150", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert queued.returncode == 0, queued.stderr[-2000:]
    items = json.loads(queued.stdout)["items"]
    assert [j["position"] for j in items] == list(range(1, len(items) + 1))
    assert all(j["phase"] in ("Queued", "Unschedulable") for j in items)
