"""Load scaling of traces and the goal line."""

from __future__ import annotations

from eventlog import events as ev
from reconciler.commands.simulate import _goal_lines
from reconciler.simulate.scale import scale_capacity, scale_time
from reconciler.simulate.trace import TraceCluster, TraceJob, sorted_trace


def _trace() -> object:
    return sorted_trace(
        jobs=[
            TraceJob(name="b", submit_ms=1000, runtime_ms=5000, pod_sets=[ev.PodSet(name="m", count=1)], delete_ms=3000),
            TraceJob(name="a", submit_ms=3000, runtime_ms=7000, pod_sets=[ev.PodSet(name="m", count=1)]),
        ],
        clusters=[TraceCluster(name="c", capacity={"cpu": 1000, "nvidia.com/gpu": 7})],
        gpu_resource="nvidia.com/gpu",
    )


def test_capacity_scale_rounds_each_resource_down() -> None:
    scaled = scale_capacity(_trace(), 0.5)  # type: ignore[arg-type]
    assert scaled.clusters[0].capacity == {"cpu": 500, "nvidia.com/gpu": 3}


def test_time_scale_moves_arrivals_and_deletions_not_run_times() -> None:
    scaled = scale_time(_trace(), 0.1)  # type: ignore[arg-type]
    b, a = scaled.jobs
    assert (b.name, b.submit_ms, b.delete_ms, b.runtime_ms) == ("b", 100, 300, 5000)
    assert (a.submit_ms, a.runtime_ms) == (300, 7000)


def test_goal_lines_compare_topk_with_the_baseline() -> None:
    profiles = {
        "multikueue": {"strategy": {"type": "AllAtOnce"}, "wait_p95_s": 10.0, "remote_copies_per_job": 4.0},
        "topk-1": {"strategy": {"type": "TopK"}, "wait_p95_s": 10.5, "remote_copies_per_job": 1.2},
        "topk-2": {"strategy": {"type": "TopK"}, "wait_p95_s": 12.0, "remote_copies_per_job": 1.9},
    }
    lines = _goal_lines(profiles, "multikueue")
    assert lines[0].startswith("goal topk-1: 1.20 copies/job") and lines[0].endswith("MET")
    # A ratio reads as a ratio, not as hexadecimal (``1.05x`` next to a ``0x2`` weight).
    assert "= 1.05\N{MULTIPLICATION SIGN} MultiKueue (baseline)'s 10.0 s" in lines[0]
    assert lines[1].endswith("NOT MET")
