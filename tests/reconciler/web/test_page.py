"""The web page in a real browser (headless Chromium): the overview shows queues and clusters, a
job link leads to the job's page with its queue, cluster and per-cluster explanation, and a name
a user chose is shown as text, never run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from .browser import page
from .views import HOSTILE, fixture_source, hostile_leader, http


async def api(base: str, path: str) -> Any:
    async with aiohttp.ClientSession() as session, session.get(base + path) as resp:
        return await resp.json()


async def _placed_with_a_feasible_cluster(base: str) -> str:
    placed = await api(base, "/api/v1/jobs?phase=Placed&limit=1000")
    for row in placed["items"]:
        doc = await api(base, f"/api/v1/jobs/{row['key']}")
        if any(v["feasible"] for v in doc["explanation"]["clusters"]):
            return str(row["key"])
    raise AssertionError("no placed job with a feasible cluster in the fixture at this point")


async def _errors_of(tab: Any) -> list[str]:
    errors: list[str] = []
    tab.on("pageerror", lambda err: errors.append(str(err)))
    tab.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    return errors


async def test_overview_then_a_job_page_with_its_queue_cluster_and_explanation(tmp_path: Path) -> None:
    source = await fixture_source()
    async with http(source) as base, page() as tab:
        errors = await _errors_of(tab)
        await tab.goto(base + "/")
        queue = tab.locator('.card.queue[data-queue="default"]')
        await queue.wait_for()
        assert "47" in await queue.inner_text()  # pending at this point of the recorded demo
        lost = tab.locator('tr[data-cluster="east-a100"]')
        assert "Lost" in await lost.inner_text()
        await tab.screenshot(path=str(tmp_path / "overview.png"))

        # A placed job that other clusters could also take (its explanation has scores), found
        # through the API; then found on the page through the filters, and its link followed.
        key = await _placed_with_a_feasible_cluster(base)
        await tab.fill("#f-text", key)
        await tab.select_option("#f-phase", "Placed")
        row = tab.locator(f'table.jobs tr[data-job="{key}"]')
        await row.wait_for()
        assert await tab.locator("table.jobs tr[data-job]").count() == 1
        cluster = (await row.locator("td").nth(5).inner_text()).strip()
        assert cluster
        await row.locator("a").click()
        await tab.wait_for_url(f"**#/jobs/{key}")
        await tab.locator("#job-name").wait_for()
        assert await tab.locator("#job-name").inner_text() == key
        assert (await tab.locator("#job-queue").inner_text()).startswith("default")
        assert await tab.locator("#job-cluster").inner_text() == cluster
        explanation = tab.locator("#explanation table.explanation")
        await explanation.wait_for()
        # Every cluster with the verdict the API (core.explain) gives: rank and scores by plugin,
        # or the filters that reject it.
        doc = await api(base, f"/api/v1/jobs/{key}")
        verdicts = doc["explanation"]["clusters"]
        assert len(verdicts) == await tab.locator("#explanation tr[data-verdict]").count() == 4
        assert any(v["feasible"] for v in verdicts)
        for v in verdicts:
            shown = await tab.locator(f'#explanation tr[data-verdict="{v["cluster"]}"]').inner_text()
            if v["feasible"]:
                assert f"#{v['rank']}" in shown and str(v["total"]) in shown
                assert all(s["plugin"] in shown for s in v["scores"])
            else:
                assert "rejected" in shown and all(r["reason"] in shown for r in v["rejections"])
        assert await tab.locator("table.timeline tr.decision").count() >= 2  # Nominated, Placed
        await tab.screenshot(path=str(tmp_path / "job.png"), full_page=True)
        assert errors == []


async def test_a_job_named_like_markup_is_shown_as_text(tmp_path: Path) -> None:
    async with hostile_leader() as source, http(source) as base, page() as tab:
        errors = await _errors_of(tab)
        dialogs: list[str] = []
        tab.on("dialog", lambda d: dialogs.append(d.message))
        await tab.goto(base + "/")
        link = tab.locator("table.jobs a", has_text=HOSTILE)
        await link.wait_for()
        assert await link.inner_text() == f"team-<b>/{HOSTILE}"
        await link.click()
        await tab.locator("#job-name").wait_for()
        assert await tab.locator("#job-name").inner_text() == f"team-<b>/{HOSTILE}"
        assert await tab.locator("#job-phase").inner_text() == "Unschedulable"
        # Shown, not parsed: no element was made from the name, nothing ran.
        assert await tab.evaluate("document.getElementById('job-name').childElementCount") == 0
        assert await tab.locator("main script").count() == 0
        assert await tab.evaluate("document.querySelectorAll('script').length") == 1  # app.js only
        await tab.screenshot(path=str(tmp_path / "hostile.png"), full_page=True)
    assert dialogs == [] and errors == []
