"""The log folded into what a user is told: phases, queue positions, and Event series aggregated
like client-go's events broadcaster (count, not floods), rate-limited per (job, reason)."""

from __future__ import annotations

from eventlog import events as ev
from reconciler.service.clusters.jobview import JobView

MIN = 60_000


def ref(name: str) -> ev.JobRef:
    return ev.JobRef(namespace="team-a", name=name, uid=f"uid-{name}")


class Log:
    def __init__(self, view: JobView | None = None) -> None:
        self.view = view or JobView()
        self.seq = 0

    def at(self, at_ms: int, event: ev.Event) -> set[str]:
        self.seq += 1
        return self.view.fold(ev.LogEntry(seq=self.seq, at_ms=at_ms, event=event))  # type: ignore[arg-type]

    def submit(self, name: str, *, at_ms: int = 0, priority: int = 0, queue: str | None = "q") -> ev.JobRef:
        job = ref(name)
        self.at(at_ms, ev.JobSubmitted(job=job, pod_sets=[], priority=priority, queue=queue))
        return job


def notes(view: JobView, job: ev.JobRef) -> list[tuple[str, str, int]]:
    return [(s.occurrence.reason, s.occurrence.note, s.count) for s in view.series_of(job.uid)]


def test_a_job_s_story_is_told_in_events_and_its_status_follows() -> None:
    log = Log()
    a = log.submit("a")
    log.at(
        1,
        ev.Unschedulable(
            job=a,
            reasons={"insufficient nvidia.com/gpu": 2},
            message="2 clusters: insufficient nvidia.com/gpu",
        ),
    )
    assert log.view.jobs[a.uid].phase == "Pending"
    assert log.view.jobs[a.uid].reason == "no cluster fits: 2 clusters: insufficient nvidia.com/gpu"
    log.at(2, ev.Nominated(job=a, clusters=["w1", "w2"], attempt=1))
    log.at(3, ev.Placed(job=a, cluster="w1", attempt=1))
    assert (log.view.jobs[a.uid].phase, log.view.jobs[a.uid].cluster) == ("Placed", "w1")
    log.at(
        4,
        ev.PreemptionClaimed(
            preemptor=ref("big"), cluster="w1", victims=[a], expires_ms=9, claim={"nvidia.com/gpu": 8}
        ),
    )
    log.at(
        4,
        ev.Evict(
            job=a,
            cluster="w1",
            attempt=1,
            preemptor=ref("big"),
            reason="Preempted by team-a/big (priority 9 > 0)",
        ),
    )
    log.at(5, ev.Requeued(job=a, reason="Preempted", cluster="w1"))
    assert (log.view.jobs[a.uid].phase, log.view.jobs[a.uid].cluster) == ("Queued", None)
    log.at(6, ev.Nominated(job=a, clusters=["w2"], attempt=2))
    log.at(7, ev.Placed(job=a, cluster="w2", attempt=2))
    log.at(8, ev.Requeued(job=a, reason="WorkerLost", cluster="w2"))
    log.at(9, ev.Finished(job=a, cluster="w3", attempt=3, succeeded=False))
    assert [(r, n) for r, n, _ in notes(log.view, a)] == [
        ("Queued", "queued in queue q at position 1"),
        ("Pending", "no cluster fits: 2 clusters: insufficient nvidia.com/gpu"),
        ("Nominated", "nominated to w1, w2 (attempt 1)"),
        ("Placed", "placed on w1 (attempt 1)"),
        ("Preempted", "preempted on w1: Preempted by team-a/big (priority 9 > 0), to free nvidia.com/gpu 8"),
        ("Requeued", "requeued (Preempted on w1); back in queue q at position 1"),
        ("Nominated", "nominated to w2 (attempt 2)"),
        ("Placed", "placed on w2 (attempt 2)"),
        ("WorkerLost", "cluster w2 stopped answering; back in queue q at position 1"),
        ("Finished", "failed on w3 (attempt 3)"),
    ]
    st = log.view.jobs[a.uid]
    assert (st.phase, st.cluster, st.last_transition_ms) == ("Failed", "w3", 9)


def test_positions_follow_the_dispatch_order_priority_first_then_submission() -> None:
    log = Log()
    first, second = log.submit("first"), log.submit("second")
    urgent = log.submit("urgent", priority=10)
    other = log.submit("other-queue", queue=None)
    assert [log.view.position(j.uid) for j in (urgent, first, second)] == [1, 2, 3]
    assert log.view.position(other.uid) == 1 and log.view.jobs[other.uid].queue == ""
    assert notes(log.view, other)[0][1] == "queued in the default queue at position 1"
    log.at(1, ev.Nominated(job=urgent, clusters=["w1"], attempt=1))
    assert [log.view.position(j.uid) for j in (urgent, first, second)] == [None, 1, 2]
    log.at(2, ev.JobDeleted(job=first))
    assert log.view.position(second.uid) == 1 and first.uid not in log.view.jobs


def test_repeats_within_the_window_are_one_event_with_a_count() -> None:
    log = Log()
    a = log.submit("a")
    for minute in range(1, 4):  # the same requeue three times, a minute apart
        log.at(minute * MIN, ev.Requeued(job=a, reason="AdmissionTimeout", cluster="w1"))
    (requeued,) = [s for s in log.view.series_of(a.uid) if s.occurrence.reason == "Requeued"]
    assert (requeued.count, requeued.first_ms, requeued.last_ms) == (3, MIN, 3 * MIN)
    # after a quiet window the next one starts a new Event (a new name)
    log.at(
        3 * MIN + log.view.series_window_ms + 1, ev.Requeued(job=a, reason="AdmissionTimeout", cluster="w1")
    )
    (again,) = [s for s in log.view.series_of(a.uid) if s.occurrence.reason == "Requeued"]
    assert again.count == 1 and again.name != requeued.name


def test_a_reason_whose_message_keeps_changing_is_rate_limited_per_job() -> None:
    view = JobView(burst=2, refill_ms=MIN)
    log = Log(view)
    a = log.submit("a")
    for i in range(5):  # five different Pending lines within a second: two Events, three suppressed
        log.at(i, ev.Unschedulable(job=a, reasons={f"r{i}": 1}, message=f"r{i}"))
    assert [n for r, n, _ in notes(view, a) if r == "Pending"] == [
        "no cluster fits: r0",
        "no cluster fits: r1",
    ]
    assert view.suppressed == 3
    assert view.jobs[a.uid].reason == "no cluster fits: r4"  # the status always says the latest
    log.at(MIN + 4, ev.Unschedulable(job=a, reasons={"r5": 1}, message="r5"))  # a token back
    assert "no cluster fits: r5" in [n for _, n, _ in notes(view, a)]


def test_two_replicas_folding_the_same_log_name_the_same_events() -> None:
    logs = [Log(), Log()]
    for log in logs:
        a = log.submit("a", at_ms=5)
        log.at(6, ev.Nominated(job=a, clusters=["w1"], attempt=1))
        log.at(7, ev.Nominated(job=a, clusters=["w1"], attempt=1))
    names = [[(s.name, s.count) for s in log.view.series_of("uid-a")] for log in logs]
    assert names[0] == names[1] and [c for _, c in names[0]] == [1, 2]
    assert all(n.startswith("a.") for n, _ in names[0])


def test_every_job_is_kept_with_one_ref_whose_repeated_strings_are_shared() -> None:
    """Kept for every job alive: each decoded entry brings its own copy of the job's ref, and of
    the strings all jobs repeat; the view keeps one ref per job, its Events reuse it."""
    log = Log()
    for name in ("a", "b"):
        # As decoded from the log: the namespace and the pending line a new string each time.
        job = ev.JobRef(namespace="".join(["team-", "a"]), name=name, uid=f"uid-{name}")
        log.at(0, ev.JobSubmitted(job=job, pod_sets=[], priority=0, queue="".join(["q", "1"])))
        again = ev.JobRef(namespace="".join(["team-", "a"]), name=name, uid=f"uid-{name}")
        log.at(1, ev.Unschedulable(job=again, reasons={}, message="".join(["no ", "room"])))
    a, b = log.view.jobs["uid-a"], log.view.jobs["uid-b"]
    assert all(s.job is a.job for s in log.view.series_of("uid-a"))
    assert a.job.namespace is b.job.namespace and a.queue is b.queue and a.reason is b.reason
    pending = [s.occurrence.note for st in (a, b) for s in log.view.series_of(st.job.uid) if s.occurrence.reason == "Pending"]
    assert len(pending) == 2 and pending[0] is pending[1]
