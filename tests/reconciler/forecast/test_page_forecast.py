"""The expected start on the web page, in a real browser (headless Chromium): the job list's
column and the job page, in the words ``kdispatch queue`` uses, from the API's rows."""

from __future__ import annotations

from pathlib import Path

from reconciler import forecast

from ..web.browser import page
from ..web.views import http
from .test_api_forecast import midway


async def test_the_list_and_the_job_page_show_when_and_where_a_waiting_job_starts(tmp_path: Path) -> None:
    _, forecasts, source = await midway()
    await forecasts.refresh()
    made = forecasts.current()
    assert made is not None
    key, estimate = next(iter(sorted(made.estimates.items())))
    words = forecast.expected_cell(estimate, now_ms=made.at_ms)
    async with http(source) as base, page() as tab:
        await tab.goto(base + "/")
        await tab.fill("#f-text", key)
        row = tab.locator(f'table.jobs tr[data-job="{key}"]')
        await row.wait_for()
        assert (await row.locator("td.expected").inner_text()).strip() == words
        await row.locator("a").click()
        await tab.wait_for_url(f"**#/jobs/{key}")
        shown = tab.locator("#job-expected")
        await shown.wait_for()
        assert (await shown.inner_text()).startswith(words + " (")
        await tab.screenshot(path=str(tmp_path / "job-expected.png"), full_page=True)
