"""``kdispatch simulate``'s start-estimate accuracy (``reconciler.simulate.estimates``): hand-computed
on a tiny trace with the real core, and the ``results.json`` keys through the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eventlog import events as ev
from reconciler.cli import main
from reconciler.simulate.profiles import PolicyDefaults, default_profiles
from reconciler.simulate.runner import CoreApi
from reconciler.simulate.session import run_profile
from reconciler.simulate.trace import TraceCluster, TraceJob, sorted_trace

GPU = "nvidia.com/gpu"
TIRESIAS = Path(__file__).resolve().parents[2] / "data" / "traces" / "tiresias-sample" / "60_job.csv"


def _job(name: str, *, at_s: int, run_s: int) -> TraceJob:
    return TraceJob(
        name=name,
        submit_ms=at_s * 1000,
        runtime_ms=run_s * 1000,
        pod_sets=[ev.PodSet(name="main", count=4, requests={GPU: 1})],
    )


def test_the_estimate_at_submission_uses_what_the_log_taught_so_far() -> None:
    # One 4-GPU cluster admitting 1 s after creation; each job takes it whole.
    # a (0 s, runs 100 s): estimated at 0 s (no admission seen yet), starts at 1 s: error 1 s.
    # b (10 s): a is expected to run the 30 min default (nothing finished yet): estimated
    #   1 + 1800 + 1 = 1802 s; a ends at 101 s, b starts at 102 s: error 1700 s.
    # c (120 s): the queue's median run time is now a's 100 s, so b (started 102 s) is expected
    #   to end at 202 s and c to start at 203 s; b ends at 152 s, c starts at 153 s: error 50 s.
    trace = sorted_trace(
        jobs=[_job("a", at_s=0, run_s=100), _job("b", at_s=10, run_s=50), _job("c", at_s=120, run_s=10)],
        clusters=[TraceCluster(name="c1", capacity={GPU: 4}, admission_latency_ms=1000)],
        gpu_resource=GPU,
    )
    profile = next(p for p in default_profiles() if p.name == "topk-1")
    run = run_profile(trace, profile=profile, settings=PolicyDefaults(), core=CoreApi.real(), start_estimates=True)
    assert run.results["start_estimate"] == {
        "median_abs_error_s": 50.0,
        "p90_abs_error_s": 1700.0,
        "jobs": 3,
        "without_estimate": 0,
        "sampled_every": 1,
    }


def test_results_json_has_the_start_estimate_of_every_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--trace", str(TIRESIAS), "--capacity-scale", "0.25", "--start-estimates"]
    code = main([*argv, "--out", str(tmp_path), "--quiet"])
    assert code == 0, capsys.readouterr().err
    doc = json.loads((tmp_path / "results.json").read_text())
    for name, profile in doc["profiles"].items():
        figures = profile["start_estimate"]
        assert set(figures) == {"median_abs_error_s", "p90_abs_error_s", "jobs", "without_estimate", "sampled_every"}, name
        assert 0 <= figures["median_abs_error_s"] <= figures["p90_abs_error_s"]
        assert figures["jobs"] + figures["without_estimate"] == 60 and figures["sampled_every"] == 1


def test_long_traces_are_sampled_to_bound_the_work() -> None:
    from reconciler.simulate.estimates import MAX_SAMPLES, sampling_stride

    assert sampling_stride(MAX_SAMPLES) == 1
    assert sampling_stride(MAX_SAMPLES + 1) == 2
    assert -(-8152 // sampling_stride(8152)) <= MAX_SAMPLES


def test_without_the_flag_they_are_left_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "--trace", str(TIRESIAS), "--out", str(tmp_path), "--quiet"]
    assert main(argv) == 0, capsys.readouterr().err
    doc = json.loads((tmp_path / "results.json").read_text())
    assert all("start_estimate" not in profile for profile in doc["profiles"].values())
