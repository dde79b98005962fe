"""``kdispatch simulate`` through its entry point, with the real core and the real SimWorker."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.cli import main
from tests.paths import TRACES

TIRESIAS = TRACES / "tiresias-sample" / "60_job.csv"
ONE_CLUSTER = """
clusters:
  - name: solo
    simulated: {capacity: {cpu: "64", memory: 256Gi, nvidia.com/gpu: 8}, admissionLatency: 0ms}
"""
TOPK1 = """
name: topk-1
filters: [ClusterHealth, ClusterFeasibility, ClusterHeadroom]
scores: [CapacityScore]
strategy: {type: TopK, k: 1}
"""


@pytest.fixture
def solo(tmp_path: Path) -> Path:
    path = tmp_path / "solo.yaml"
    path.write_text(ONE_CLUSTER)
    return path


def test_hand_computed_waits_on_the_tiresias_sample(tmp_path: Path, solo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The first six jobs on one 8-GPU cluster (submit s, GPUs, duration s):
    j0 (0, 1, 164), j1 (30, 8, 147), j2 (53, 2, 127), j3 (79, 1, 121), j4 (99, 4, 121), j5 (132, 8, 138).
    j0, j2, j3, j4 fit at once (1+2+1+4 = 8 GPUs). j1 needs all 8: they are free when j4 ends at
    99+121 = 220, so j1 waits 220-30 = 190 s and runs to 367; j5 (same priority, submitted later)
    then waits 367-132 = 235 s."""
    profile = tmp_path / "topk1.yaml"
    profile.write_text(TOPK1)
    out = tmp_path / "out"
    code = main(["simulate", "--trace", str(TIRESIAS), "--clusters", str(solo), "--profile", str(profile),
                 "--limit", "6", "--out", str(out), "--quiet"])
    assert code == 0
    rows = {r["job"]: r for r in map(json.loads, (out / "placements.jsonl").read_text().splitlines())}
    waits = {k.removeprefix("trace/tiresias-"): r["wait_s"] for k, r in rows.items()}
    assert waits == {"0": 0.0, "1": 190.0, "2": 0.0, "3": 0.0, "4": 0.0, "5": 235.0}
    assert rows["trace/tiresias-5"]["finished"] == 367 + 138
    results = json.loads((out / "results.json").read_text())["profiles"]["topk-1"]
    assert results["makespan_s"] == 505.0 and results["finished"] == 6
    # One copy each: TopK-1 with the headroom filter never nominates two 8-GPU jobs onto 8 free GPUs.
    assert results["remote_copies_per_job"] == 1.0
    assert "topk-1" in capsys.readouterr().out


def test_default_profiles_outputs_and_determinism(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Once through the installed entry point (a subprocess), once in process: same bytes."""
    outs = [tmp_path / "a", tmp_path / "b"]
    proc = subprocess.run(
        [sys.executable, "-m", "reconciler", "simulate", "--trace", str(TIRESIAS), "--out", str(outs[0])],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert main(["simulate", "--trace", str(TIRESIAS), "--out", str(outs[1]), "--quiet"]) == 0
    assert (outs[0] / "results.json").read_bytes() == (outs[1] / "results.json").read_bytes()
    assert (outs[0] / "placements.jsonl").read_bytes() == (outs[1] / "placements.jsonl").read_bytes()
    doc = json.loads((outs[0] / "results.json").read_text())
    assert list(doc["profiles"]) == ["multikueue", "all-at-once", "incremental-3", "topk-1", "topk-2"]
    for res in doc["profiles"].values():
        for key in ("jobs", "wait_p50_s", "wait_p95_s", "wait_p99_s", "remote_copies_per_job", "preemptions",
                    "replaced", "gpu_utilization", "makespan_s"):
            assert key in res
        assert res["jobs"] == 60 and res["finished"] == 60
        assert 0 < res["gpu_utilization"] <= 1
    lines = (outs[0] / "placements.jsonl").read_text().splitlines()
    assert len(lines) == 5 * 60
    row = json.loads(lines[0])
    assert set(row) >= {"job", "profile", "cluster", "submitted", "placed", "finished"}
    for png in ("wait_cdf.png", "gpu_utilization.png"):
        assert (outs[0] / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # The progress bar goes to stderr, the table to stdout.
    assert "jobs submitted" in proc.stderr and "copies/job" in proc.stdout


def test_csv_trace_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "mine.csv"
    trace.write_text(
        "job,submit_s,runtime_s,count,gpu,priority_class,priority,selector\n"
        "a,0,100,4,1,batch,10,\n"
        "b,5,50,2,2,batch,10,\n"
        "pinned,6,10,1,1,urgent,1000,zone=b\n"
    )
    clusters = tmp_path / "c.yaml"
    clusters.write_text(
        "- {name: ca, labels: {zone: a}, simulated: {capacity: {cpu: '8', nvidia.com/gpu: 8}, admissionLatency: 0ms}}\n"
        "- {name: cb, labels: {zone: b}, simulated: {capacity: {cpu: '8', nvidia.com/gpu: 8}, admissionLatency: 0ms}}\n"
    )
    out = tmp_path / "out"
    assert main(["simulate", "--trace", str(trace), "--clusters", str(clusters), "--out", str(out), "--quiet"]) == 0
    rows = [json.loads(line) for line in (out / "placements.jsonl").read_text().splitlines()]
    pinned = [r for r in rows if r["job"] == "trace/pinned"]
    assert len(pinned) == 5 and {r["cluster"] for r in pinned} == {"cb"}
    doc = json.loads((out / "results.json").read_text())
    assert set(doc["profiles"]["topk-1"]["by_priority_class"]) == {"batch", "urgent"}


def test_bad_trace_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("job,submit_s\nx,1\n")
    assert main(["simulate", "--trace", str(bad), "--quiet"]) == 2
    assert "missing columns ['runtime_s']" in capsys.readouterr().err


def test_saved_logs_replay_and_verify_like_a_real_log(tmp_path: Path) -> None:
    """The simulated log is a real log: every decision batch recomputes identically."""
    out = tmp_path / "out"
    assert main(["simulate", "--trace", str(TIRESIAS), "--out", str(out), "--save-logs", "--quiet", "--limit", "30"]) == 0
    for name in ("all-at-once",):
        log = out / f"log-{name}.jsonl.gz"
        proc = subprocess.run(
            [sys.executable, "-m", "reconciler", "replay", "--verify", "--file", str(log)],
            capture_output=True, text=True, timeout=60,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
        assert "all identical" in proc.stdout


def test_a_resource_no_cluster_declares_is_warned_about(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clusters = tmp_path / "gpu-only.yaml"
    clusters.write_text("- {name: g, simulated: {capacity: {nvidia.com/gpu: 8}}}\n")
    assert main(["simulate", "--trace", str(TIRESIAS), "--clusters", str(clusters), "--limit", "3", "--quiet",
                 "--profile", str(_write(tmp_path / "p.yaml", TOPK1))]) == 0
    captured = capsys.readouterr()
    assert "warning: 3 jobs request cpu, which no cluster declares" in captured.err
    assert "never placed" in captured.out


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
