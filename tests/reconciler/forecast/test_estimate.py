"""``estimate_starts`` on small scripted states, and the durations it is fed."""

from __future__ import annotations

from eventlog import events as ev
from eventlog.kube.names import EXPECTED_DURATION_ANNOTATION
from reconciler import core
from reconciler.forecast import DurationLearner, Durations, Estimate, estimate_starts, expected_line
from reconciler.service.forecasts import _forecast
from tests.reconciler.core.harness import Harness, cluster, job, of_type, ref

T0 = 1_000_000
TEN_MIN = 600_000
LATENCY = 2_000


def running_and_waiting(*, waiting: int = 1) -> Harness:
    """One 8-GPU cluster running ``a`` (placed at T0 + 1000), ``waiting`` 8-GPU jobs behind it."""
    h = Harness()
    h.feed(cluster("c1", gpu=8), ev.ClusterHeartbeat(cluster="c1"), at_ms=T0)
    nominated = h.feed(job("a", gpu=8))
    assert of_type(nominated, ev.Nominated)
    h.feed(ev.RemoteCreated(job=ref("a"), cluster="c1", attempt=1))
    placed = h.feed(ev.RemoteAdmitted(job=ref("a"), cluster="c1", attempt=1), at_ms=T0 + 1000)
    assert of_type(placed, ev.Placed)
    for i in range(waiting):
        h.feed(job(f"b{i}", gpu=8), at_ms=T0 + 2000 + i)
    assert h.state.jobs["team/b0"].phase == core.phases.UNSCHEDULABLE
    return h


def durations(**by_job: int) -> Durations:
    return Durations(by_job={f"team/{k}": v for k, v in by_job.items()}, admission_latency_ms={"c1": LATENCY})


def test_a_job_behind_a_running_one_starts_at_its_expected_end_plus_admission_latency() -> None:
    h = running_and_waiting()
    got = estimate_starts(h.state, now_ms=T0 + 5000, durations=durations(a=TEN_MIN, b0=TEN_MIN))
    assert got == {"team/b0": Estimate(start_ms=T0 + 1000 + TEN_MIN + LATENCY, cluster="c1")}


def test_the_queue_behind_runs_one_after_the_other() -> None:
    h = running_and_waiting(waiting=2)
    got = estimate_starts(h.state, now_ms=T0 + 5000, durations=durations(a=TEN_MIN, b0=TEN_MIN, b1=TEN_MIN))
    first = T0 + 1000 + TEN_MIN + LATENCY
    assert got["team/b0"].start_ms == first
    assert got["team/b1"].start_ms == first + TEN_MIN + LATENCY


def test_a_running_job_past_its_expected_end_is_taken_to_end_now() -> None:
    h = running_and_waiting()
    now = T0 + 2 * TEN_MIN
    got = estimate_starts(h.state, now_ms=now, durations=durations(a=TEN_MIN, b0=TEN_MIN))
    assert got["team/b0"] == Estimate(start_ms=now + LATENCY, cluster="c1")


def test_the_live_state_is_not_touched_and_the_answer_is_the_same_twice() -> None:
    h = running_and_waiting(waiting=3)
    before = core.dump_state(h.state)
    d = durations(a=TEN_MIN)
    first = estimate_starts(h.state, now_ms=T0 + 5000, durations=d)
    assert core.dump_state(h.state) == before
    assert estimate_starts(h.state, now_ms=T0 + 5000, durations=d) == first
    assert core.decide(h.state) == []  # nothing left behind for the live leader to act on


def test_the_leaders_forecast_runs_its_restored_copy_itself_with_the_same_answer() -> None:
    """``service/forecasts.py`` hands over the state's dump; the copy it restores is run forward
    itself (``own=True``), not copied once more, and estimates what the live state gives."""
    h = running_and_waiting(waiting=3)
    d = durations(a=TEN_MIN, b0=TEN_MIN, b1=TEN_MIN)
    want = estimate_starts(h.state, now_ms=T0 + 5000, durations=d, limit=2)
    dump = [bytearray(core.dump_state(h.state))]
    assert _forecast(dump, h.state.plugins, T0 + 5000, d, 2) == want
    assert dump == [] and len(want) == 2  # the dump is taken, so it is freed once restored
    copy = core.load_state(core.dump_state(h.state), plugins=h.state.plugins)
    assert estimate_starts(copy, now_ms=T0 + 5000, durations=d, limit=2, own=True) == want
    assert copy.seq > h.state.seq  # run forward in place


def test_only_the_first_limit_jobs_in_dispatch_order_are_estimated() -> None:
    h = running_and_waiting(waiting=3)
    got = estimate_starts(h.state, now_ms=T0 + 5000, durations=durations(a=TEN_MIN), limit=2)
    assert sorted(got) == ["team/b0", "team/b1"]


def test_a_job_that_cannot_start_within_the_horizon_has_no_estimate() -> None:
    h = running_and_waiting()
    got = estimate_starts(h.state, now_ms=T0 + 5000, durations=durations(a=10 * TEN_MIN), horizon_ms=TEN_MIN)
    assert got == {}


def test_expected_line_says_when_and_where() -> None:
    line = expected_line(Estimate(start_ms=T0 + 12 * 60_000, cluster="west-h100"), now_ms=T0)
    assert line == "expected to start in ~12 min on west-h100"
    assert expected_line(None, now_ms=T0) == ""


# ---- durations ------------------------------------------------------------------------------


def _entry(seq: int, at_ms: int, event: ev.AnyEvent) -> ev.LogEntry:
    return ev.LogEntry(seq=seq, at_ms=at_ms, event=event)


def _submitted(name: str, manifest: dict[str, object] | None, queue: str = "q1") -> ev.JobSubmitted:
    return ev.JobSubmitted(job=ref(name), pod_sets=[], manifest=manifest, cluster_queue=queue, runtime_ms=1)


def test_the_annotation_wins_over_active_deadline_seconds_and_bad_values_are_ignored() -> None:
    learner = DurationLearner()
    both = {
        "metadata": {"annotations": {EXPECTED_DURATION_ANNOTATION: "45m"}},
        "spec": {"activeDeadlineSeconds": 7200},
    }
    learner.observe(_entry(1, 0, _submitted("both", both)))
    learner.observe(_entry(2, 0, _submitted("deadline", {"spec": {"activeDeadlineSeconds": 7200}})))
    bad = {"metadata": {"annotations": {EXPECTED_DURATION_ANNOTATION: "soon"}}}
    learner.observe(_entry(3, 0, _submitted("bad", bad)))
    d = learner.durations()
    assert d.runtime_ms("team/both") == 45 * 60_000
    assert d.runtime_ms("team/deadline") == 7_200_000
    assert d.runtime_ms("team/bad") == d.default_ms  # never the simulated-runtime hint


def test_a_queue_learns_the_median_run_time_of_its_finished_jobs() -> None:
    learner = DurationLearner()
    for seq, (name, run_ms) in enumerate((("x", 60_000), ("y", 120_000), ("z", 600_000)), start=1):
        learner.observe(_entry(seq, 0, _submitted(name, None)))
        learner.observe(_entry(seq + 100, 1000, ev.Placed(job=ref(name), cluster="c1", attempt=1)))
        learner.observe(_entry(seq + 200, 1000 + run_ms, ev.Finished(job=ref(name), cluster="c1", attempt=1)))
    learner.observe(_entry(500, 0, _submitted("new", None)))
    learner.observe(_entry(501, 0, _submitted("elsewhere", None, queue="q2")))
    d = learner.durations()
    assert d.by_queue == {"q1": 120_000}
    assert d.runtime_ms("team/new") == 120_000
    assert d.runtime_ms("team/elsewhere") == d.default_ms
