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


async def test_queue_facts_from_the_summary_win_over_the_counts() -> None:
    """With queues configured the core's summary has per-ClusterQueue figures
    (``reconciler.core.queues.facts.queues_summary``); they win over what the rows count from the
    jobs (tests/reconciler/shell/test_tenancy_views.py shows them on a real tenancy log)."""
    source = await fixture_source()
    state = source.state()
    assert state is not None
    summary = dict(source.board(state).summary)
    waiting = [r.key for r in view.job_rows(state, summary, waiting_only=True)]
    summary["queues"] = {
        "default": {
            "pending": 3,
            "admitted": 1,
            "usage": {"a100/nvidia.com/gpu": 4},
            "nominal": {"a100/nvidia.com/gpu": 8},
            "weighted_share": 0.25,
            "weight": 2.0,
            "cohort": "all",
        },
        "idle": {"pending": 0, "admitted": 0, "weight": 1.0},
    }
    rows = {r.name: r for r in view.queue_rows(state, summary)}
    assert sorted(rows) == ["default", "idle"]
    d = rows["default"]
    assert (d.pending, d.admitted, d.usage, d.quota) == (3, 1, {"a100/nvidia.com/gpu": 4}, {"a100/nvidia.com/gpu": 8})
    assert (d.fair_share, d.weight, d.cohort) == (0.25, 2.0, "all") and d.facts["cohort"] == "all"
    assert rows["idle"].pending == 0 and rows["idle"].quota is None
    # Positions count within the queue's dispatch order.
    rows_waiting = view.job_rows(state, summary, queue="default", waiting_only=True)
    assert [r.position for r in rows_waiting] == list(range(1, len(waiting) + 1))
    assert [r.key for r in rows_waiting] == waiting
