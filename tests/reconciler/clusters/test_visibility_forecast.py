"""The leader's start-time forecast in the ``kdispatch.io/status`` annotation of a waiting job,
written by the status reporter against the kube API stand-in, and rewritten when it changes."""

from __future__ import annotations

from typing import Any

from eventlog import events as ev
from reconciler.forecast import Estimate, Forecast
from tests.reconciler.clusters.conftest import ApiServer, batch_job
from tests.reconciler.clusters.test_visibility import JOBS, reporting, status_of
from tests.waiting import eventually

MIN = 60_000


def status(server: ApiServer) -> dict[str, Any]:
    """The job's status annotation; empty until the reporter has written one."""
    obj = server.emulator.get(*JOBS, "team-a", "train")
    assert obj is not None
    return status_of(server, "train") if "kdispatch.io/status" in obj["metadata"].get("annotations", {}) else {}


async def test_a_waiting_job_is_told_when_and_where_it_is_expected_to_start(api_servers: Any) -> None:
    server: ApiServer = await api_servers("manager")
    obj = server.emulator.put(*JOBS, batch_job("train"))
    job = ev.JobRef(namespace="team-a", name="train", uid=obj["metadata"]["uid"])
    entries = [ev.LogEntry(seq=1, at_ms=1000, event=ev.JobSubmitted(job=job, pod_sets=[], queue="q"))]
    made = [Forecast(at_ms=1000, estimates={"team-a/train": Estimate(start_ms=1000 + 12 * MIN, cluster="west-h100")})]
    async with reporting(entries, server, instance="r", leading=lambda: True) as reporter:
        reporter.forecast = lambda: made[0]
        reporter.refresh_s = 0.05
        await eventually(lambda: "expectedStart" in status(server), what="expected start written")
        expected = status(server)["expectedStart"]
        assert expected == {
            "time": "1970-01-01T00:12:01Z",
            "cluster": "west-h100",
            "message": "expected to start in ~12 min on west-h100",
        }
        # A new forecast (the leader's next one) reaches the annotation at the periodic refresh.
        made[0] = Forecast(at_ms=2000, estimates={"team-a/train": Estimate(start_ms=2000 + 3 * MIN, cluster="east")})
        await eventually(
            lambda: status(server)["expectedStart"]["message"] == "expected to start in ~3 min on east",
            what="forecast refreshed",
        )
        # Placed: a job that runs has no expected start.
        entries.append(ev.LogEntry(seq=2, at_ms=3000, event=ev.Placed(job=job, cluster="east", attempt=1)))
        await eventually(lambda: status(server)["phase"] == "Placed", what="placed")
        assert "expectedStart" not in status(server)
