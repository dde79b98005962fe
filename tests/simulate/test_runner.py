"""The virtual-time runner and the metrics, with the real SimWorker and a tiny fake core.

The fake core isolates the runner's own job (time, batches, the actuator, the recorder); the
real core is exercised through the CLI in test_cli.py.
"""

from __future__ import annotations

import json

import pytest

from eventlog import events as ev
from reconciler.simulate.metrics import utilization
from reconciler.simulate.profiles import PolicyDefaults, default_profiles
from reconciler.simulate.runner import EPOCH_MS, CoreApi
from reconciler.simulate.session import encode_results, results_document, run_profile
from reconciler.simulate.trace import Trace, TraceCluster, TraceJob, sorted_trace
from tests.simulate import fake_core

FAKE = CoreApi(
    new_state=fake_core.new_state,
    fold=fake_core.fold,
    decide=fake_core.decide,
    next_deadline=fake_core.next_deadline,
)
GPU = "nvidia.com/gpu"


def _job(name: str, *, at_s: int, run_s: int, gpus: int, delete_s: int | None = None) -> TraceJob:
    return TraceJob(
        name=name,
        submit_ms=at_s * 1000,
        runtime_ms=run_s * 1000,
        pod_sets=[ev.PodSet(name="main", count=gpus, requests={GPU: 1})],
        delete_ms=None if delete_s is None else delete_s * 1000,
    )


def _trace(*jobs: TraceJob) -> Trace:
    clusters = [TraceCluster(name=n, capacity={GPU: 4}, admission_latency_ms=1000) for n in ("c1", "c2")]
    return sorted_trace(jobs=list(jobs), clusters=clusters, gpu_resource=GPU)


def _profile(name: str) -> ev.Profile:
    return next(p for p in default_profiles() if p.name == name)


def test_waits_copies_and_utilization_follow_the_workers() -> None:
    # Both clusters admit A at 1 s; the runner's stable coin toss (a hash of job and cluster)
    # delivers c2's admission first, so A runs on c2 (its c1 copy is withdrawn). B lands on c1 at
    # 11 s; C waits for B to finish on c1 at 61 s (A holds c2 until 101 s): waits 1, 1, 41 s.
    trace = _trace(
        _job("a", at_s=0, run_s=100, gpus=4), _job("b", at_s=10, run_s=50, gpus=4), _job("c", at_s=20, run_s=10, gpus=4)
    )
    run = run_profile(trace, profile=_profile("all-at-once"), settings=PolicyDefaults(), core=FAKE)
    rows = {r["job"]: r for r in run.placements}
    assert {k: (r["wait_s"], r["cluster"]) for k, r in rows.items()} == {
        "trace/a": (1.0, "c2"),
        "trace/b": (1.0, "c1"),
        "trace/c": (41.0, "c1"),
    }
    assert rows["trace/c"]["finished"] == 71.0
    res = run.results
    assert res["remote_copies_per_job"] == 2.0 and res["remote_copies"] == 6
    assert (res["wait_p50_s"], res["wait_p95_s"], res["wait_p99_s"]) == (1.0, 41.0, 41.0)
    assert res["makespan_s"] == 101.0
    # GPU-seconds: a 4x100 + b 4x50 + c 4x10 = 640 over 8 GPUs x 101 s.
    assert res["gpu_utilization"] == round(640 / (8 * 101), 4)
    assert res["finished"] == 3 and res["unfinished"] == 0


def test_topk_one_makes_one_copy_per_job() -> None:
    trace = _trace(_job("a", at_s=0, run_s=10, gpus=2), _job("b", at_s=1, run_s=10, gpus=2))
    run = run_profile(trace, profile=_profile("topk-1"), settings=PolicyDefaults(), core=FAKE)
    assert run.results["remote_copies_per_job"] == 1.0
    assert {r["cluster"] for r in run.placements} == {"c1"}


def test_a_job_that_never_fits_is_reported_unfinished_and_the_run_ends() -> None:
    trace = _trace(_job("small", at_s=0, run_s=5, gpus=1), _job("huge", at_s=0, run_s=5, gpus=16))
    run = run_profile(trace, profile=_profile("all-at-once"), settings=PolicyDefaults(), core=FAKE)
    assert run.results["unfinished"] == 1 and run.results["finished"] == 1
    huge = next(r for r in run.placements if r["job"] == "trace/huge")
    assert huge["placed"] is None and huge["wait_s"] is None


def test_a_user_deletion_withdraws_the_waiting_copies() -> None:
    trace = _trace(_job("hog", at_s=0, run_s=1000, gpus=4), _job("hog2", at_s=0, run_s=1000, gpus=4),
                   _job("gives-up", at_s=5, run_s=10, gpus=4, delete_s=50))
    run = run_profile(trace, profile=_profile("all-at-once"), settings=PolicyDefaults(), core=FAKE)
    row = next(r for r in run.placements if r["job"] == "trace/gives-up")
    assert row["deleted"] == 50.0 and row["placed"] is None
    assert run.results["deleted_before_placement"] == 1 and run.results["unfinished"] == 0


def test_results_are_byte_identical_across_runs() -> None:
    jobs = [_job(f"j{i}", at_s=i * 3, run_s=20 + (i * 7) % 30, gpus=1 + i % 4) for i in range(30)]
    trace = _trace(*jobs)

    def once() -> bytes:
        runs = [run_profile(trace, profile=p, settings=PolicyDefaults(), core=FAKE) for p in default_profiles()]
        return encode_results(results_document(trace, runs))

    first = once()
    assert first == once()
    doc = json.loads(first)
    assert list(doc["profiles"]) == ["multikueue", "all-at-once", "incremental-3", "topk-1", "topk-2"]
    assert doc["baseline"] == "multikueue"


def test_entries_are_stamped_with_virtual_time_and_batches() -> None:
    seen: list[ev.LogEntry] = []

    class Spy:
        def observe(self, entry: ev.LogEntry) -> None:
            seen.append(entry)

    from reconciler.simulate.profiles import policy_for
    from reconciler.simulate.runner import VirtualRun

    trace = _trace(_job("a", at_s=7, run_s=3, gpus=1))
    run = VirtualRun(trace, policy=policy_for(_profile("topk-1"), settings=PolicyDefaults(), priority_classes={}),
                     profile_name="topk-1", core=FAKE, observers=[Spy()])
    run.run()
    assert [e.seq for e in seen] == list(range(1, len(seen) + 1))
    assert isinstance(seen[0].event, ev.PolicyLoaded) and seen[0].at_ms == EPOCH_MS + 7000
    placed = next(e for e in seen if isinstance(e.event, ev.Placed))
    assert placed.at_ms == EPOCH_MS + 8000 and placed.batch is not None
    finished = next(e for e in seen if isinstance(e.event, ev.Finished))
    assert finished.at_ms == EPOCH_MS + 11_000


def test_utilization_buckets_integrate_the_step_function() -> None:
    mean, series = utilization([(0, 4), (50, 0)], capacity=8, start_ms=0, end_ms=100, buckets=4)
    assert mean == 0.25
    assert [p[1] for p in series] == [0.5, 0.5, 0.0, 0.0]


@pytest.mark.parametrize("name", ["all-at-once", "incremental-3", "topk-1", "topk-2"])
def test_default_profiles_share_filters_and_scores(name: str) -> None:
    p = _profile(name)
    assert "CapacityScore" in [s.name for s in p.scores]
    assert "ClusterFeasibility" in [f.name for f in p.filters]
    assert p.strategy.type == {"all": "AllAtOnce", "inc": "Incremental", "top": "TopK"}[name[:3]]
