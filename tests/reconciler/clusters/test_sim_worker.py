"""The pure simulated worker: quota, admission order, runtime, eviction, deletion, faults."""

from __future__ import annotations

import time

from eventlog.events import (
    JobRef,
    PodSet,
    RemoteAdmitted,
    RemoteCreated,
    RemoteEvicted,
    RemoteFinished,
    RemoteGone,
    RemoteRejected,
)
from reconciler.simworker import CopyState, SimWorker


def job(n: int) -> JobRef:
    return JobRef(namespace="ns", name=f"j{n}", uid=f"uid-{n}")


def gpus(n: int, *, pods: int = 1) -> list[PodSet]:
    return [PodSet(name="main", count=pods, requests={"nvidia.com/gpu": n, "cpu": 1000 * n})]


def kinds(events: list[object]) -> list[tuple[str, str]]:
    return [(type(e).__name__, e.job.name) for e in events]  # type: ignore[attr-defined]


def make(capacity: int = 8, **kw: int) -> SimWorker:
    return SimWorker("w1", {"nvidia.com/gpu": capacity}, **kw)


def test_quota_per_resource_admits_what_fits_and_queues_the_rest() -> None:
    w = SimWorker("w1", {"nvidia.com/gpu": 8, "cpu": 6000}, default_runtime_ms=1000)
    w.create(job(1), 1, gpus(4), 0, None, 0)
    w.create(job(2), 1, gpus(4), 0, None, 0)  # GPUs fit (8) but cpu does not (8000 > 6000)
    facts = w.advance(0)
    assert kinds(facts) == [("RemoteCreated", "j1"), ("RemoteCreated", "j2"), ("RemoteAdmitted", "j1")]
    assert all(f.cluster == "w1" and f.attempt == 1 for f in facts)  # type: ignore[attr-defined]
    assert w.usage() == {"nvidia.com/gpu": 4, "cpu": 4000}
    assert w.get("uid-2", 1).state is CopyState.PENDING  # type: ignore[union-attr]
    # memory is not a limited resource here: a job asking for lots of it still fits
    w.create(job(3), 1, [PodSet(name="m", count=1, requests={"memory": 10**15})], 0, None, 0)
    assert kinds(w.advance(0)) == [("RemoteCreated", "j3"), ("RemoteAdmitted", "j3")]


def test_admission_in_priority_then_fifo_order() -> None:
    w = make(4, default_runtime_ms=100)
    w.create(job(0), 1, gpus(4), 0, None, 0)  # fills the cluster
    w.create(job(1), 1, gpus(4), 1, None, 1)
    w.create(job(2), 1, gpus(4), 5, None, 2)
    w.create(job(3), 1, gpus(4), 5, None, 3)
    w.create(job(4), 1, gpus(4), 1, None, 4)
    w.advance(10)
    admitted: list[str] = []
    while (t := w.next_event_ms()) is not None:
        admitted += [e.job.name for e in w.advance(t) if isinstance(e, RemoteAdmitted)]
    assert admitted == ["j2", "j3", "j1", "j4"]


def test_best_effort_fifo_lets_a_small_job_pass_a_big_one_that_does_not_fit() -> None:
    w = make(8, default_runtime_ms=100)
    w.create(job(1), 1, gpus(6), 0, None, 0)
    w.create(job(2), 1, gpus(4), 9, None, 1)  # higher priority, but does not fit yet
    w.create(job(3), 1, gpus(2), 0, None, 2)  # fits in what is left
    assert [e.job.name for e in w.advance(2) if isinstance(e, RemoteAdmitted)] == ["j1", "j3"]


def test_job_runs_for_its_runtime_and_finishes_releasing_quota() -> None:
    w = make(4, default_runtime_ms=500)
    w.create(job(1), 1, gpus(4), 0, 2_000, 1_000)
    w.create(job(2), 1, gpus(4), 0, None, 1_000)
    w.advance(1_000)
    assert w.next_event_ms() == 3_000
    assert w.advance(2_999) == []
    facts = w.advance(3_000)
    assert kinds(facts) == [("RemoteFinished", "j1"), ("RemoteAdmitted", "j2")]
    assert isinstance(facts[0], RemoteFinished) and facts[0].succeeded
    assert w.get("uid-1", 1).state is CopyState.FINISHED  # type: ignore[union-attr]
    timed = w.advance_timed(10_000)
    assert [(t, type(e).__name__) for t, e in timed] == [(3_500, "RemoteFinished")]
    assert w.next_event_ms() is None
    assert w.usage() == {}


def test_admission_latency_delays_admission() -> None:
    w = make(4, admission_latency_ms=250)
    w.create(job(1), 1, gpus(1), 0, None, 1_000)
    assert kinds(w.advance(1_000)) == [("RemoteCreated", "j1")]
    assert w.next_event_ms() == 1_250
    assert kinds(w.advance(1_250)) == [("RemoteAdmitted", "j1")]


def test_duplicate_create_is_ignored_and_deleted_copies_are_not_resurrected() -> None:
    w = make(4)
    assert w.create(job(1), 1, gpus(1), 0, None, 0)
    assert w.create(job(1), 1, gpus(1), 0, None, 5)
    assert kinds(w.advance(5)) == [("RemoteCreated", "j1"), ("RemoteAdmitted", "j1")]
    assert w.delete("uid-1", 1, 6)
    assert w.create(job(1), 1, gpus(1), 0, None, 7)  # a late duplicate from a second actuator
    assert w.delete("uid-1", 1, 8)
    facts = w.advance(10)
    assert kinds(facts) == [("RemoteGone", "j1")]
    assert w.copies() == []
    # a new attempt of the same job is a different copy
    w.create(job(1), 2, gpus(1), 0, None, 11)
    assert [(type(e).__name__, e.attempt) for e in w.advance(11)] == [  # type: ignore[attr-defined]
        ("RemoteCreated", 2),
        ("RemoteAdmitted", 2),
    ]


def test_eviction_releases_quota_and_is_reported_once() -> None:
    w = make(4, default_runtime_ms=1_000)
    w.create(job(1), 1, gpus(4), 0, None, 0)
    w.advance(0)  # j1 runs
    w.create(job(2), 1, gpus(4), 9, None, 1)
    w.create(job(3), 1, gpus(4), 0, None, 1)
    w.advance(1)
    w.evict("uid-1", 1, 100, reason="Preempted")
    w.evict("uid-1", 1, 101)
    w.evict("uid-3", 1, 102)  # a pending copy can be evicted too: it leaves the queue
    facts = w.advance(100_000)
    assert kinds(facts) == [
        ("RemoteEvicted", "j1"),
        ("RemoteAdmitted", "j2"),
        ("RemoteEvicted", "j3"),
        ("RemoteFinished", "j2"),
    ]
    assert w.get("uid-2", 1).admitted_ms == 100  # type: ignore[union-attr]
    assert isinstance(facts[0], RemoteEvicted) and facts[0].reason == "Preempted"
    assert w.get("uid-1", 1).state is CopyState.EVICTED  # type: ignore[union-attr]
    assert w.get("uid-3", 1).state is CopyState.EVICTED  # type: ignore[union-attr]


def test_deleting_a_running_copy_cancels_its_finish() -> None:
    w = make(4, default_runtime_ms=1_000)
    w.create(job(1), 1, gpus(4), 0, None, 0)
    w.create(job(2), 1, gpus(4), 0, None, 0)
    w.advance(0)
    w.delete("uid-1", 1, 10)
    facts = w.advance(10)
    assert kinds(facts) == [("RemoteGone", "j1"), ("RemoteAdmitted", "j2")]
    assert isinstance(facts[0], RemoteGone)
    assert [type(e).__name__ for e in w.advance(1_010)] == ["RemoteFinished"]
    assert w.next_event_ms() is None


def test_silence_for_a_while_holds_facts_and_loses_requests() -> None:
    w = make(4, default_runtime_ms=100)
    w.create(job(1), 1, gpus(1), 0, None, 0)
    w.silence(1_000)
    assert w.heartbeat(500).reachable is False
    assert not w.create(job(2), 1, gpus(1), 0, None, 500)  # the request is lost
    assert w.advance(500) == []  # facts are held back ...
    assert w.next_event_ms() == 1_000
    facts = w.advance_timed(1_000)  # ... and delivered when the silence ends, with their times
    assert [(t, type(e).__name__) for t, e in facts] == [
        (0, "RemoteCreated"),
        (0, "RemoteAdmitted"),
        (100, "RemoteFinished"),
    ]
    hb = w.heartbeat(1_000)
    assert hb.reachable and hb.cluster == "w1"
    assert w.get("uid-2", 1) is None


def test_silence_for_good_until_recovered() -> None:
    w = make(4, default_runtime_ms=100)
    w.create(job(1), 1, gpus(2), 0, None, 0)
    w.silence(None)
    assert w.advance(10**9) == []
    assert w.next_event_ms() is None
    assert w.heartbeat(10**9).reachable is False
    w.recover()
    assert kinds(w.advance(10**9)) == [
        ("RemoteCreated", "j1"),
        ("RemoteAdmitted", "j1"),
        ("RemoteFinished", "j1"),
    ]
    assert w.heartbeat(10**9).reachable


def test_reject_next_n() -> None:
    w = make(4)
    w.reject_next(2, reason="QuotaExceeded")
    for n in range(3):
        w.create(job(n), 1, gpus(1), 0, None, 0)
    facts = w.advance(0)
    assert kinds(facts) == [
        ("RemoteRejected", "j0"),
        ("RemoteRejected", "j1"),
        ("RemoteCreated", "j2"),
        ("RemoteAdmitted", "j2"),
    ]
    assert isinstance(facts[0], RemoteRejected) and facts[0].reason == "QuotaExceeded"
    w.create(job(0), 1, gpus(1), 0, None, 1)  # a retry of a rejected copy stays rejected
    assert w.advance(1) == []


def test_slow_admission_and_failures() -> None:
    w = make(4, admission_latency_ms=10, default_runtime_ms=50)
    w.slow_admission(1_000, until_ms=500)
    w.fail_next(1)
    w.create(job(1), 1, gpus(1), 0, None, 0)
    w.create(job(2), 1, gpus(1), 0, None, 600)  # after the slow period
    timed = w.advance_timed(10_000)
    got = [(t, type(e).__name__, e.job.name) for t, e in timed]  # type: ignore[attr-defined]
    assert (610, "RemoteAdmitted", "j2") in got
    assert (1_010, "RemoteAdmitted", "j1") in got
    finished = [e for _, e in timed if isinstance(e, RemoteFinished)]
    assert [(e.job.name, e.succeeded) for e in finished] == [("j2", False), ("j1", True)]


def test_heartbeat_reports_usage() -> None:
    w = SimWorker("w1", {"nvidia.com/gpu": 8})
    w.create(job(1), 1, gpus(2, pods=3), 0, None, 0)
    w.advance(0)
    assert w.heartbeat(0).usage == {"nvidia.com/gpu": 6, "cpu": 6000}


def test_many_jobs_drain_quickly_without_per_tick_scanning() -> None:
    """8,000 jobs on a full cluster: the heap and the early-stop scan keep this well under a second
    of work. (No timing assertion: the check is that everything admits and finishes in order.)"""
    w = SimWorker("big", {"nvidia.com/gpu": 64, "cpu": 512_000}, default_runtime_ms=1_000)
    n = 8_000
    for i in range(n):
        w.create(job(i), 1, gpus(1 + i % 8), i % 3, 500 + (i * 37) % 5_000, i)
    started = time.perf_counter()
    created = admitted = finished = 0
    while (t := w.next_event_ms()) is not None:
        for e in w.advance(t):
            created += isinstance(e, RemoteCreated)
            admitted += isinstance(e, RemoteAdmitted)
            finished += isinstance(e, RemoteFinished)
        assert w.usage().get("nvidia.com/gpu", 0) <= 64
    elapsed = time.perf_counter() - started
    assert (created, admitted, finished) == (n, n, n)
    print(f"drained {n} jobs in {elapsed:.2f}s")
