"""``reconciler.view``: per-queue facts from the core's summary plug in as they come (tenancy);
until then one implicit queue holds every job."""

from __future__ import annotations

from reconciler import view

from .views import fixture_source


async def test_one_implicit_queue_until_the_core_knows_queues() -> None:
    source = await fixture_source()
    state = source.state()
    assert state is not None
    summary = source.board(state).summary
    assert "queues" not in summary
    [row] = view.queue_rows(state, summary)
    assert row.name == view.DEFAULT_QUEUE and row.quota is None and row.fair_share is None
    assert row.pending + row.admitted + row.suspended + row.finished <= len(state.jobs)


async def test_queue_facts_from_the_summary_win_and_jobs_follow_their_queue() -> None:
    source = await fixture_source()
    state = source.state()
    assert state is not None
    summary = dict(source.board(state).summary)
    jobs = {k: dict(v) for k, v in summary["jobs"].items()}
    waiting = [r.key for r in view.job_rows(state, summary, waiting_only=True)]
    for key in waiting[::2]:
        jobs[key]["queue"] = "team-b"
    summary["jobs"] = jobs
    summary["queues"] = {
        "team-b": {"nominal_quota": {"nvidia.com/gpu": 8}, "fair_share": 0.25, "weight": 2},
        "idle": {"quota": {"cpu": 1000}},
    }
    rows = {r.name: r for r in view.queue_rows(state, summary)}
    assert sorted(rows) == ["default", "idle", "team-b"]
    assert rows["team-b"].quota == {"nvidia.com/gpu": 8} and rows["team-b"].fair_share == 0.25
    assert rows["team-b"].facts["weight"] == 2 and rows["idle"].pending == 0
    assert rows["team-b"].pending == len(waiting[::2]) and rows["default"].pending == len(waiting) - len(waiting[::2])
    # Positions count within each queue's own dispatch order.
    b = view.job_rows(state, summary, queue="team-b", waiting_only=True)
    assert [r.position for r in b] == list(range(1, len(b) + 1))
    assert [r.key for r in b] == waiting[::2]
