"""``web.authorization: kubernetes``: the API over HTTP, the manager's TokenReview and
SubjectAccessReview answered by a kmock API server (routes on its public API). alice may list Jobs
in team-a only; bob in team-a and team-b; any other token is not authenticated."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import kmock
import msgspec
import pytest
from kubernetes_asyncio import client

from eventlog import events as ev
from eventlog.memory import MemoryLog
from reconciler.config import ConfigError, decode_config
from reconciler.service.clusters.api import KubeApi
from reconciler.service.loop import LeaderLoop, LoopSettings, wait_ready
from reconciler.service.web import KubeAccess, ViewSource
from reconciler.service.wiring import Settings, build
from tests.reconciler.clusters.conftest import ApiServer
from tests.reconciler.clusters.kubeapi import KubeApiEmulator

from ..shell.scenario import CLUSTERS, POLICY, submission
from .views import http

TOKENS = {"alice-token": ("alice", ["devs"]), "bob-token": ("bob", ["ops"])}
GRANTS = {("alice", "team-a"), ("bob", "team-a"), ("bob", "team-b")}
JOBS = {"team-a": ["a-0", "a-1"], "team-b": ["b-0"], "team-c": ["c-0"]}


@dataclass
class Reviews:
    """What the manager API was asked (the cache's effect is counted here)."""

    tokens: list[str]
    access: list[dict[str, Any]]


def answer_reviews(emu: KubeApiEmulator) -> Reviews:
    seen = Reviews([], [])

    def token_review(request: kmock.Request) -> kmock.Response:
        token = request.data["spec"]["token"]
        seen.tokens.append(token)
        who = TOKENS.get(token)
        status: dict[str, Any] = {"authenticated": False, "error": "invalid bearer token"}
        if who is not None:
            status = {"authenticated": True, "user": {"username": who[0], "uid": who[0] + "-uid", "groups": who[1]}}
        return kmock.Response(status=201, payload={**request.data, "status": status})

    def access_review(request: kmock.Request) -> kmock.Response:
        spec = request.data["spec"]
        seen.access.append(spec)
        attrs = spec["resourceAttributes"]
        allowed = (attrs["group"], attrs["resource"], attrs["verb"]) == ("batch", "jobs", "list") and (
            spec["user"],
            attrs["namespace"],
        ) in GRANTS
        return kmock.Response(status=201, payload={**request.data, "status": {"allowed": allowed}})

    emu["post /apis/authentication.k8s.io/v1/tokenreviews"] << token_review
    emu["post /apis/authorization.k8s.io/v1/subjectaccessreviews"] << access_review
    return seen


@dataclass
class Setup:
    base: str
    reviews: Reviews
    manager: ApiServer
    access: KubeAccess


@pytest.fixture
async def served() -> AsyncIterator[Setup]:
    emu = KubeApiEmulator(name="manager")
    reviews = answer_reviews(emu)
    await emu.__aenter__()
    manager = ApiServer(emulator=emu)
    await manager.start()
    api_client = client.ApiClient(client.Configuration(host=manager.url))
    access = KubeAccess(KubeApi(api_client, role="manager", cluster="manager", timeout_s=2.0), ttl_s=60.0)

    log = MemoryLog()
    loop = LeaderLoop(log, LoopSettings(leader_id="t", policy=POLICY, idle_wait_s=0.01))
    stop = asyncio.Event()
    term = asyncio.create_task(loop.run_term(stop=stop))
    try:
        await wait_ready(loop, timeout_s=20)
        for cluster in CLUSTERS:
            await log.inbox.publish(cluster)
        for ns, names in JOBS.items():
            for i, name in enumerate(names):
                job = ev.JobRef(namespace=ns, name=name, uid=f"uid-{ns}-{name}")
                await log.inbox.publish(msgspec.structs.replace(submission(i, gpus=99), job=job))
        want = sum(len(n) for n in JOBS.values())
        for _ in range(2000):  # a bound, not a timing: until every job has been decided on
            state = loop.state
            if state is not None and sum(j.phase == "Unschedulable" for j in state.jobs.values()) == want:
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the leader never decided on the jobs")
        source = ViewSource(state=lambda: loop.state if loop.ready.is_set() else None, reader=log.reader)
        async with http(source, access=access) as base:
            yield Setup(base, reviews, manager, access)
    finally:
        stop.set()
        await term
        await api_client.close()
        await manager.kill()
        await emu.__aexit__(None, None, None)


async def get(base: str, path: str, token: str | None = None) -> tuple[int, Any, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as session, session.get(base + path, headers=headers) as resp:
        return resp.status, await resp.json(), resp.headers


async def test_no_token_or_an_unknown_token_is_401(served: Setup) -> None:
    for path in ("/api/v1/jobs", "/api/v1/queues", "/api/v1/clusters", "/api/v1/jobs/team-a/a-0"):
        code, doc, headers = await get(served.base, path)
        assert code == 401 and "no bearer token" in doc["error"], (path, doc)
        assert headers["WWW-Authenticate"].startswith("Bearer")
        code, doc, _ = await get(served.base, path, token="stolen")
        assert code == 401 and "does not accept this token" in doc["error"], (path, doc)
    assert served.reviews.access == []  # nobody unauthenticated got as far as an access review


async def test_a_user_sees_only_the_jobs_of_namespaces_they_may_list(served: Setup) -> None:
    code, doc, _ = await get(served.base, "/api/v1/jobs", token="alice-token")
    assert code == 200
    assert sorted(j["key"] for j in doc["items"]) == ["team-a/a-0", "team-a/a-1"] and doc["total"] == 2
    code, doc, _ = await get(served.base, "/api/v1/jobs?phase=Unschedulable", token="bob-token")
    assert sorted(j["key"] for j in doc["items"]) == ["team-a/a-0", "team-a/a-1", "team-b/b-0"]
    # what was asked: may this user list batch Jobs in that namespace, with the token's groups
    asked = {(s["user"], s["resourceAttributes"]["namespace"]) for s in served.reviews.access}
    assert asked == {(u, ns) for u in ("alice", "bob") for ns in JOBS}
    assert all(s["groups"] == TOKENS[s["user"] + "-token"][1] for s in served.reviews.access)

    code, doc, _ = await get(served.base, "/api/v1/jobs/team-a/a-1", token="alice-token")
    assert code == 200 and doc["job"]["key"] == "team-a/a-1" and doc["timeline"]
    code, doc, _ = await get(served.base, "/api/v1/jobs/team-b/b-0", token="alice-token")
    assert code == 403 and "alice may not list jobs in namespace 'team-b'" in doc["error"]
    # a job that does not exist in a namespace she may not read: 403 as well, no "did you mean"
    code, doc, _ = await get(served.base, "/api/v1/jobs/team-c/nope", token="alice-token")
    assert code == 403
    code, doc, _ = await get(served.base, "/api/v1/jobs/team-a/b-0", token="alice-token")
    assert code == 404 and "team-b" not in doc["error"]

    # queue and cluster rows are counts (no names): every authenticated user sees them whole
    code, doc, _ = await get(served.base, "/api/v1/queues", token="alice-token")
    assert code == 200 and doc["items"][0]["pending"] == 4
    code, doc, _ = await get(served.base, "/api/v1/clusters", token="alice-token")
    assert code == 200 and {c["name"] for c in doc["items"]} == {"east", "west"}


async def test_decisions_are_cached_and_a_silent_manager_api_is_503_not_allowed(served: Setup) -> None:
    for _ in range(3):
        code, _, _ = await get(served.base, "/api/v1/jobs", token="alice-token")
        assert code == 200
    assert served.reviews.tokens == ["alice-token"] and len(served.reviews.access) == len(JOBS)

    await served.manager.kill()
    code, doc, _ = await get(served.base, "/api/v1/jobs", token="alice-token")
    assert code == 200  # still within the cache's time
    code, doc, _ = await get(served.base, "/api/v1/jobs", token="bob-token")
    assert code == 503 and "cannot check access" in doc["error"]


async def test_kubernetes_authorization_needs_a_manager_cluster() -> None:
    """A config with only simulated clusters has no manager API to ask: start-up says so."""
    config = decode_config(
        {
            "web": {"authorization": "kubernetes"},
            "clusters": [{"name": "sim", "simulated": {"capacity": {"cpu": "8"}}}],
        }
    )
    settings = Settings(loop=LoopSettings(leader_id="t", policy=POLICY))
    with pytest.raises(ConfigError, match=r"web.authorization: 'kubernetes'.*no manager cluster.*set 'none'"):
        await build(MemoryLog(), config, settings)  # type: ignore[arg-type]


def test_other_jobs_named_in_a_shown_job_are_hidden_by_namespace() -> None:
    """A preemption names its preemptor and victims: those of unreadable namespaces keep their
    namespace and lose their name, in the fields, the one-line text and the explanation."""
    from reconciler.service.web.api import _namespaces, _redact, _redact_row
    from reconciler.view import TimelineRow

    keys = {"team-a/x", "team-b/secret-name"}
    row = TimelineRow(
        seq=1,
        at_ms=0,
        type="PreemptionClaimed",
        decision=True,
        text="preemptor=team-a/x victims=[team-b/secret-name]",
        fields={
            "preemptor": {"namespace": "team-a", "name": "x", "uid": "u1"},
            "victims": [{"namespace": "team-b", "name": "secret-name", "uid": "u2"}],
        },
    )
    explanation = {"claims": ["team-b/secret-name", "team-a/x"], "resource": "nvidia.com/gpu"}
    assert _namespaces([row, explanation], keys) == {"team-a", "team-b"}
    shown = _redact_row(row, {"team-b"}, keys)
    assert shown.fields["victims"] == [{"namespace": "team-b", "name": "(hidden)"}]
    assert shown.fields["preemptor"]["name"] == "x"
    assert "secret-name" not in shown.text and "team-b" in shown.text
    assert _redact(explanation, {"team-b"}, keys) == {
        "claims": ["team-b/(hidden)", "team-a/x"],
        "resource": "nvidia.com/gpu",  # not a job key: untouched
    }


async def test_the_page_asks_for_a_token_and_shows_only_that_users_jobs(served: Setup) -> None:
    """In headless Chromium: the page answers 401 with a sign-in form; alice's token (kept in the
    tab's sessionStorage) shows team-a's jobs, not team-b's."""
    from .browser import page

    async with page() as tab:
        await tab.goto(served.base + "/#/jobs")
        await tab.locator("form.login #token").wait_for()
        await tab.fill("#token", "alice-token")
        await tab.locator("form.login button").click()
        await tab.locator('table.jobs tr[data-job="team-a/a-0"]').wait_for()
        keys = await tab.locator("table.jobs tr[data-job]").evaluate_all("rows => rows.map(r => r.dataset.job)")
        assert sorted(keys) == ["team-a/a-0", "team-a/a-1"]
        assert await tab.evaluate("sessionStorage.getItem('kdispatch-token')") == "alice-token"
