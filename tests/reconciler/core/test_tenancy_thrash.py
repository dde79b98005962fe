"""No thrash (issue 13): a job preempted and placed again is the most recently started job, and
under "most recently started first" it would be the victim of every next preemption. With queues,
a job evicted fewer times before goes first within a priority, when that takes no more victims."""

from __future__ import annotations

from eventlog import events as ev
from reconciler.core import dump_state, load_state
from tests.reconciler.core.harness import Harness, of_type
from tests.reconciler.core.tenancy import config, cq, gpu_cluster, team_job

WITHIN = ev.QueuePreemption(within_cluster_queue="LowerPriority")


def world(queue: ev.ClusterQueueSpec, *, clusters: int, gpu: int) -> Harness:
    h = Harness()
    h.inputs(config(queue), *(gpu_cluster(f"c{i}", gpu) for i in range(clusters)))
    h.step()
    return h


def admit_all(h: Harness) -> None:
    for key in sorted(h.state.jobs):
        job = h.state.jobs[key]
        if job.phase == "Nominated" and job.nominated:
            h.inputs(ev.RemoteAdmitted(job=job.ref, cluster=job.nominated[0], attempt=job.attempt))
    h.step()


def preempt(h: Harness, preemptor: ev.JobSubmitted) -> list[str]:
    """Submit the preemptor, carry out its evictions, run it; returns its victims."""
    (claim,) = of_type(h.feed(preemptor), ev.PreemptionClaimed)
    for job in (h.state.jobs[v.key] for v in claim.victims):
        h.inputs(ev.RemoteEvicted(job=job.ref, cluster=job.cluster or "", attempt=job.attempt))
    h.step()
    admit_all(h)
    assert h.state.jobs[preemptor.job.key].phase == "Placed"
    return [v.key for v in claim.victims]


def finish(h: Harness, key: str) -> None:
    """The preemptor finishes; its victims wait no more and run again."""
    job = h.state.jobs[key]
    h.feed(ev.RemoteFinished(job=job.ref, cluster=job.cluster or "", attempt=job.attempt))
    admit_all(h)
    assert {j.phase for j in h.state.jobs.values()} == {"Placed", "Finished"}, "victims back"


def test_priority_preemption_takes_another_job_than_the_one_it_evicted_last_time() -> None:
    # One 4-GPU cluster, quota above it: capacity runs out, priority preemption within the queue.
    h = world(cq("team-a", gpu=100), clusters=1, gpu=4)
    h.feed(*(team_job("team-a", f"low{i}") for i in range(4)))
    admit_all(h)
    assert preempt(h, team_job("team-a", "urgent0", priority=10)) == ["team-a/low0"]  # started together: name
    finish(h, "team-a/urgent0")
    # low0 runs again, the most recently started: it would be the first victim again.
    assert h.state.jobs["team-a/low0"].evictions == 1
    assert preempt(h, team_job("team-a", "urgent1", priority=10)) == ["team-a/low1"]
    finish(h, "team-a/urgent1")
    assert preempt(h, team_job("team-a", "urgent2", priority=10)) == ["team-a/low2"]
    # The count is the job record's, folded from the log: a snapshot keeps it.
    state = load_state(dump_state(h.state))
    pool = state.pool
    assert [int(pool.evicted[pool.row_of[f"team-a/low{i}"]]) for i in (0, 1, 3)] == [1, 1, 0]


def test_quota_preemption_takes_another_job_than_the_one_it_evicted_last_time() -> None:
    # 4 GPUs of quota on a 16-GPU fleet: quota runs out, preemption for quota within the queue.
    h = world(cq("team-a", gpu=4, preemption=WITHIN), clusters=2, gpu=8)
    h.feed(*(team_job("team-a", f"low{i}") for i in range(4)))
    admit_all(h)
    first = preempt(h, team_job("team-a", "urgent0", priority=10))
    finish(h, "team-a/urgent0")
    (again,) = preempt(h, team_job("team-a", "urgent1", priority=10))
    assert len(first) == 1 and again != first[0]
    assert h.state.jobs[first[0]].phase == "Placed"


def test_the_job_evicted_before_still_goes_when_sparing_it_takes_more_victims() -> None:
    # low0 holds 2 GPUs, low1 and low2 one each: a 2-GPU preemptor takes low0 alone, or both others.
    h = world(cq("team-a", gpu=100), clusters=1, gpu=4)
    h.feed(team_job("team-a", "low0", gpu=2), team_job("team-a", "low1"), team_job("team-a", "low2"))
    admit_all(h)
    assert preempt(h, team_job("team-a", "urgent0", gpu=2, priority=10)) == ["team-a/low0"]
    finish(h, "team-a/urgent0")
    assert preempt(h, team_job("team-a", "urgent1", gpu=2, priority=10)) == ["team-a/low0"]


def test_a_lower_priority_is_still_taken_first_however_often_it_was_evicted() -> None:
    h = world(cq("team-a", gpu=100), clusters=1, gpu=4)
    h.feed(team_job("team-a", "lowest", priority=-5), *(team_job("team-a", f"low{i}") for i in range(3)))
    admit_all(h)
    assert preempt(h, team_job("team-a", "urgent0", priority=10)) == ["team-a/lowest"]
    finish(h, "team-a/urgent0")
    assert preempt(h, team_job("team-a", "urgent1", priority=10)) == ["team-a/lowest"]


def test_reclaim_takes_another_job_than_the_one_it_evicted_last_time() -> None:
    # team-a borrows team-b's idle quota and fills the one cluster; team-b takes it back.
    reclaim = ev.QueuePreemption(reclaim_within_cohort="Any")
    h = Harness()
    h.inputs(config(cq("team-a", gpu=1), cq("team-b", gpu=3, preemption=reclaim)), gpu_cluster("c0", 4))
    h.step()
    h.feed(*(team_job("team-a", f"a{i}") for i in range(4)))
    admit_all(h)
    assert preempt(h, team_job("team-b", "b0")) == ["team-a/a0"]
    finish(h, "team-b/b0")
    assert preempt(h, team_job("team-b", "b1")) == ["team-a/a1"]
