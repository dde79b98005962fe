"""The leader's forecasts (``service.forecasts``) in ``/api/v1/jobs`` and in the status annotation,
over the recorded demo log at seq 1500 (47 jobs wait)."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from eventlog.jsonl import JsonlLog
from reconciler import core, forecast
from reconciler.history.replay import replay
from reconciler.service.clusters.jobview import JobView
from reconciler.service.clusters.visibility import status_json
from reconciler.service.forecasts import Forecasts
from reconciler.service.web import ViewSource

from ..web.views import FIXTURE, MIDWAY, http


async def midway() -> tuple[JsonlLog, Forecasts, ViewSource]:
    reader = JsonlLog(str(FIXTURE))
    state = (await replay(reader, until_seq=MIDWAY)).state
    forecasts = Forecasts(reader, lambda: state)
    source = ViewSource(state=lambda: state, reader=reader, forecast=forecasts.current)
    return reader, forecasts, source


async def get(base: str, path: str) -> Any:
    async with aiohttp.ClientSession() as session, session.get(base + path) as resp:
        assert resp.status == 200
        return await resp.json()


async def test_jobs_carry_the_expected_start_the_forecast_made() -> None:
    _, forecasts, source = await midway()
    assert await forecasts.refresh()
    assert not await forecasts.refresh()  # the same state: not due again
    made = forecasts.current()
    assert made is not None and made.at_ms > 0 and len(made.estimates) > 30
    async with http(source) as base:
        listed = await get(base, "/api/v1/jobs?phase=Unschedulable&limit=1000")
        for row in listed["items"]:
            estimate = made.get(row["key"])
            assert row["expected_start_ms"] == (estimate.start_ms if estimate else None)
            assert row["expected_cluster"] == (estimate.cluster if estimate else None)
        key = next(k for k in made.estimates)
        one = await get(base, f"/api/v1/jobs/{key}")
        assert one["job"]["expected_start_ms"] == made.estimates[key].start_ms
        assert one["job"]["expected_cluster"] == made.estimates[key].cluster


async def test_the_forecast_learns_only_up_to_the_state_it_forecasts() -> None:
    _, forecasts, _ = await midway()
    await forecasts.refresh()
    assert forecasts.seq == MIDWAY


async def test_the_status_annotation_of_a_waiting_job_says_when_and_where() -> None:
    reader, forecasts, _ = await midway()
    await forecasts.refresh()
    made = forecasts.current()
    assert made is not None
    jobs = JobView()
    async for batch in reader.read(until_seq=MIDWAY):
        for entry in batch:
            jobs.fold(entry)
    waiting = [st for st in jobs.jobs.values() if st.phase in ("Queued", "Pending")]
    st = next(s for s in waiting if made.get(f"{s.job.namespace}/{s.job.name}") is not None)
    estimate = made.get(f"{st.job.namespace}/{st.job.name}")
    assert estimate is not None
    status = json.loads(status_json(st, position=1, observed_seq=1, forecast=made))
    expected = status["expectedStart"]
    assert expected["cluster"] == estimate.cluster
    assert expected["message"] == forecast.expected_line(estimate, now_ms=made.at_ms)
    assert expected["message"].startswith("expected to start in ") and expected["message"].endswith(estimate.cluster)
    assert "expectedStart" not in json.loads(status_json(st, position=1, observed_seq=1))


async def test_a_forecast_is_remade_only_after_the_interval_in_log_time() -> None:
    reader = JsonlLog(str(FIXTURE))
    early = (await replay(reader, until_seq=MIDWAY)).state
    later = (await replay(reader, until_seq=MIDWAY + 50)).state
    much_later = (await replay(reader, until_seq=MIDWAY + 400)).state
    interval = much_later.now_ms - early.now_ms  # the demo runs fast: its log moves seconds, not minutes
    assert 0 < later.now_ms - early.now_ms < interval
    current: list[core.State | None] = [early]
    forecasts = Forecasts(reader, lambda: current[0], interval_ms=interval)
    assert await forecasts.refresh()
    current[0] = later
    assert not await forecasts.refresh()  # the log moved on, but by less than the interval
    current[0] = much_later
    assert await forecasts.refresh()
    made = forecasts.current()
    assert made is not None and made.at_ms == much_later.now_ms and forecasts.runs == 2
    current[0] = None
    assert not await forecasts.refresh() and forecasts.current() is None  # stepped down: nothing to show
