"""``/api/v1`` on the reconciler's HTTP server, over the recorded demo log: the rows agree with the
core (``summary``, ``explain``), pagination walks every job once, errors say what is accepted."""

from __future__ import annotations

import urllib.parse
from typing import Any

import aiohttp

from reconciler import core

from .views import HOSTILE, MIDWAY, fixture_source, hostile_leader, http


async def get(base: str, path: str) -> tuple[int, Any]:
    # The server runs on this event loop: the client must not block it.
    async with aiohttp.ClientSession() as session, session.get(base + path) as resp:
        return resp.status, await resp.json()


async def test_queues_clusters_and_jobs_agree_with_the_folded_state() -> None:
    source = await fixture_source()
    state = source.state()
    assert state is not None
    summary = core.summary(state)
    async with http(source) as base:
        code, queues = await get(base, "/api/v1/queues")
        assert code == 200 and queues["seq"] == MIDWAY
        [default] = queues["items"]
        waiting = [k for k, j in summary["jobs"].items() if j["phase"] in ("Queued", "Unschedulable")]
        assert default["name"] == "default" and default["pending"] == len(waiting) == 47
        assert default["admitted"] == sum(1 for j in summary["jobs"].values() if j["phase"] in ("Nominated", "Placed"))

        code, clusters = await get(base, "/api/v1/clusters")
        assert code == 200
        health = {c["name"]: c["health"] for c in clusters["items"]}
        assert health == {name: c["health"] for name, c in summary["clusters"].items()}
        assert health["east-a100"] == "Lost"

        code, pending = await get(base, "/api/v1/jobs?phase=Unschedulable&limit=1000")
        assert code == 200
        assert [j["position"] for j in pending["items"]] == list(range(1, len(pending["items"]) + 1))
        assert {j["key"] for j in pending["items"]} == {k for k in waiting if summary["jobs"][k]["phase"] == "Unschedulable"}


async def test_pagination_walks_every_job_once_in_list_order() -> None:
    source = await fixture_source()
    async with http(source) as base:
        _, whole = await get(base, "/api/v1/jobs?limit=1000")
        seen: list[str] = []
        token = ""
        pages = 0
        while True:
            code, page = await get(base, "/api/v1/jobs?limit=7" + (f"&continue={token}" if token else ""))
            assert code == 200 and len(page["items"]) <= 7 and page["total"] == whole["total"]
            seen += [j["key"] for j in page["items"]]
            pages += 1
            token = page["continue"]
            if token is None:
                break
        assert seen == [j["key"] for j in whole["items"]] and len(seen) == len(set(seen)) == whole["total"]
        assert pages == -(-whole["total"] // 7)


async def test_a_job_has_its_timeline_and_the_explanation_explain_gives() -> None:
    source = await fixture_source()
    state = source.state()
    assert state is not None
    key = "demo/urgent-004"  # waiting behind the lost cluster at MIDWAY
    async with http(source) as base:
        code, doc = await get(base, "/api/v1/jobs/" + key)
    assert code == 200
    assert doc["job"]["phase"] == "Unschedulable" and doc["job"]["position"] == 1 and doc["job"]["queue"] == "default"
    expected = core.explain(state, key)
    assert doc["explanation"]["summary"] == expected.summary
    assert [c["cluster"] for c in doc["explanation"]["clusters"]] == [c.cluster for c in expected.clusters]
    lost = next(c for c in doc["explanation"]["clusters"] if c["cluster"] == "east-a100")
    assert not lost["feasible"] and any(r["plugin"] == "ClusterHealth" for r in lost["rejections"])
    types = [t["type"] for t in doc["timeline"]]
    assert types[0] == "JobSubmitted" and "Unschedulable" in types
    assert all(t["seq"] <= MIDWAY for t in doc["timeline"])
    assert [t["seq"] for t in doc["timeline"]] == sorted(t["seq"] for t in doc["timeline"])


async def test_errors_name_the_parameter_and_what_is_accepted() -> None:
    source = await fixture_source()
    async with http(source) as base:
        code, doc = await get(base, "/api/v1/jobs?phase=Pending")
        assert code == 400 and doc["error"].startswith("phase: 'Pending' is not a job phase; one of Queued")
        code, doc = await get(base, "/api/v1/jobs?limit=0")
        assert code == 400 and "limit" in doc["error"] and "1 to 1000" in doc["error"]
        code, doc = await get(base, "/api/v1/jobs?continue=bogus")
        assert code == 400 and doc["error"].startswith("continue:")
        code, doc = await get(base, "/api/v1/jobs?queue=defualt")
        assert code == 404 and "did you mean: default?" in doc["error"] and doc["queues"] == ["default"]
        code, doc = await get(base, "/api/v1/jobs/demo/urgent-04")
        assert code == 404 and "did you mean: demo/urgent-004" in doc["error"]


async def test_a_replica_without_state_says_it_is_not_the_leader() -> None:
    source = await fixture_source()
    source.state = lambda: None
    async with http(source) as base:
        code, doc = await get(base, "/api/v1/queues")
    assert code == 503 and "not the leader" in doc["error"]


async def test_a_name_with_markup_and_a_slash_is_data_in_the_api() -> None:
    async with hostile_leader() as source, http(source) as base:
        code, doc = await get(base, "/api/v1/jobs/" + urllib.parse.quote("team-<b>", safe="") + "/" + urllib.parse.quote(HOSTILE, safe=""))
    assert code == 200, doc
    assert doc["job"]["name"] == HOSTILE and doc["job"]["namespace"] == "team-<b>"
    assert doc["job"]["phase"] == "Unschedulable" and doc["timeline"][0]["type"] == "JobSubmitted"
