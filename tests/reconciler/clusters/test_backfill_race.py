"""The manager watcher's backfill racing the webhook's record (issue 18, found by the soak).

The webhook recorded a job (its ``JobSubmitted`` is in the inbox) but the log has not folded it
yet (the leader is between terms, or the actuator's view lags): the watcher, asking that view,
backfills the job. Both facts reach the real inbox; the job must be recorded once."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, MutableMapping
from typing import Any

from eventlog import events as ev
from eventlog.jetstream import JetStreamLog
from reconciler.service.clusters.manager import ManagerWatcher
from reconciler.service.clusters.reporter import InboxReporter
from tests.reconciler.clusters import admission
from tests.reconciler.clusters.conftest import ApiServer, Recorder, logged
from tests.waiting import eventually
from webhook import admit


def user_job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": "user-queue"},
        },
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}
                    ],
                }
            }
        },
    }


async def copied_into_the_log(jslog: JetStreamLog) -> list[ev.LogEntry]:
    """What a leader would append: every inbox fact, in inbox order."""
    seqr = jslog.sequencer("test-leader")
    await seqr.resume()
    while items := await seqr.pull(max_items=100, timeout_s=0.5):
        await seqr.append_inputs(items, at_ms=1)
    return [e async for batch in jslog.reader.read() for e in batch]


async def test_a_backfill_of_a_job_the_webhook_recorded_but_the_log_has_not_folded_is_dropped(
    jslog: JetStreamLog,
    api_servers: Callable[..., Any],
    logs: list[MutableMapping[str, Any]],
) -> None:
    server: ApiServer = await api_servers("manager")
    stored = admission.admitted(user_job("raced"))
    stored["metadata"]["uid"] = "uid-raced"  # the API server fills it before /validate
    [record] = admit.validate(admission.request(stored, uid="review-1"), admission.SETTINGS).records
    await jslog.inbox.publish(record.event, msg_id=record.msg_id)  # the webhook's record: in the inbox
    server.emulator.put("batch", "v1", "jobs", stored)  # ... and the API server stores the job

    watcher = ManagerWatcher(
        server.api(role="manager", cluster="manager"),
        InboxReporter(jslog.inbox),
        known=lambda uid: False,  # the log has not folded the webhook's JobSubmitted yet
        resync_s=1,
        backfill_after_s=0.2,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    try:
        await eventually(lambda: logged(logs, "job_backfilled"), what="the watcher's backfill of the job")
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)

    submitted = [e.event for e in await copied_into_the_log(jslog) if isinstance(e.event, ev.JobSubmitted)]
    assert [(s.job.uid, s.source) for s in submitted] == [("uid-raced", "webhook")]


async def test_nothing_is_backfilled_before_the_log_view_has_caught_up_and_nothing_held_after(
    api_servers: Callable[..., Any], logs: list[MutableMapping[str, Any]]
) -> None:
    """A restarted reconciler lists every job on the manager while its actuator is still reading
    the log: each looks unknown until then, and would be backfilled again (past the inbox's
    duplicate window: recorded twice). Once the log knows a job, the watcher forgets it."""
    server: ApiServer = await api_servers("manager")
    stored = admission.admitted(user_job("old"))
    stored["metadata"]["uid"] = "uid-old"
    server.emulator.put("batch", "v1", "jobs", stored)
    recorder = Recorder()
    known: set[str] = set()
    caught_up = asyncio.Event()
    watcher = ManagerWatcher(
        server.api(role="manager", cluster="manager"),
        recorder,
        known=lambda uid: uid in known,
        resync_s=1,
        backfill_after_s=0,
        ready=caught_up,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(watcher.run(stop))
    try:
        await eventually(lambda: recorder.of(ev.JobObserved), what="the job listed")
        assert await watcher.backfill_due() == 0 and not recorder.of(ev.JobSubmitted)
        known.add("uid-old")  # the actuator reads the log to its end: the job was there
        caught_up.set()
        assert await watcher.backfill_due() == 0
        assert watcher.held_for_backfill == 0
        fresh = admission.admitted(user_job("new"))
        fresh["metadata"]["uid"] = "uid-new"  # one the webhook did not record
        server.emulator.put("batch", "v1", "jobs", fresh)
        await eventually(lambda: logged(logs, "job_backfilled"), what="the unknown job backfilled")
        assert [s.job.uid for s in recorder.of(ev.JobSubmitted)] == ["uid-new"]
        known.add("uid-new")  # ... and recorded
        await eventually(lambda: watcher.held_for_backfill == 0, what="nothing held once the log knows it")
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
