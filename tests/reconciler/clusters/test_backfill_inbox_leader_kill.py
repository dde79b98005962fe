"""Backfill under fire (issue 18): SIGKILL the nats-server leading the inbox stream of a 3-node R3
cluster while the real webhook admits jobs. While the stream elects a new leader the webhook
answers some reviews ``allowed`` without recording them (its publish bound runs out); the manager
watcher must backfill exactly those. Every allowed job ends in the log exactly once.

The webhook is ``python -m webhook`` over HTTPS, reviews are sent as the API server sends them
(reconciler.demo.apiserver), an allowed job is stored on the manager stand-in (kmock), and the
watcher reports through the real inbox; a sequencer copies the inbox into the log as the leader
does. It prints how long the backfill took (nothing here asserts a time)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from eventlog import events as ev
from eventlog.embedded import EmbeddedNats
from eventlog.jetstream import JetStreamLog, connect
from reconciler.demo.apiserver import AdmissionFailed, ApiServer
from reconciler.service.clusters.manager import ManagerWatcher
from reconciler.service.clusters.reporter import InboxReporter
from tests.eventlog.cluster import three_nodes
from tests.reconciler.clusters.conftest import ApiServer as KubeStandIn
from tests.waiting import Unmet, eventually
from tests.webhook.conftest import start_webhook

pytestmark = pytest.mark.timeout(300)

JOBS = 300
CONCURRENCY = 24
KILL_AFTER = JOBS // 4  # accepted reviews before the inbox leader is killed
BACKFILL_AFTER_S = 3.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[EmbeddedNats]]:
    with three_nodes(tmp_path) as nodes:
        yield nodes


def user_job(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"job-{i:04d}",
            "namespace": "team-a",
            "labels": {"kueue.x-k8s.io/queue-name": "q"},
        },
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}
                    ],
                }
            }
        },
    }


class Leader:
    """Copies the inbox into the log as the leader does, resuming after any error (the streams
    elect new leaders), and keeps what the log holds: the uids submitted, when, by whom."""

    def __init__(self, jlog: JetStreamLog) -> None:
        self.jlog = jlog
        self.submitted: dict[str, list[tuple[float, str]]] = {}  # uid -> [(when appended, source)]
        self.stop = asyncio.Event()

    def knows(self, uid: str) -> bool:
        return uid in self.submitted

    async def run(self) -> None:
        seqr = self.jlog.sequencer("test-leader")
        while not self.stop.is_set():
            try:
                await seqr.resume()
                while not self.stop.is_set():
                    items = await seqr.pull(max_items=200, timeout_s=0.2)
                    if not items:
                        continue
                    now = time.monotonic()
                    for entry in await seqr.append_inputs(items, at_ms=1):
                        if isinstance(entry.event, ev.JobSubmitted):
                            self.submitted.setdefault(entry.event.job.uid, []).append(
                                (now, entry.event.source)
                            )
            except Exception as err:  # LogError, timeouts, API errors while stream leaders move
                print("leader: resuming after", type(err).__name__, err)
                await asyncio.sleep(0.2)


async def test_every_job_allowed_while_the_inbox_leader_is_killed_is_in_the_log_once(
    cluster: list[EmbeddedNats], api_servers: Callable[..., Any], tmp_path: Path
) -> None:
    urls = ",".join(node.url for node in cluster)
    root = f"bk{uuid.uuid4().hex[:8]}"
    jlog = await connect(urls, replicas=3, root=root, publish_timeout_s=2.0)
    manager: KubeStandIn = await api_servers("manager")
    # Its config says the streams are R3, as the reconciler's does (a client opening them with
    # another replication would change theirs).
    config = tmp_path / "kdispatch.yaml"
    config.write_text(json.dumps({"nats": {"url": urls, "replicas": 3}, "dataDir": str(tmp_path)}))
    hook = await asyncio.to_thread(
        start_webhook, nats_url=urls, root=root, data_dir=tmp_path, extra=["--config", str(config)]
    )
    leader = Leader(jlog)
    watcher = ManagerWatcher(
        manager.api(role="manager", cluster="manager"),
        InboxReporter(jlog.inbox),
        known=leader.knows,
        resync_s=60,
        backfill_after_s=BACKFILL_AFTER_S,
    )
    stop_watch = asyncio.Event()
    tasks = [asyncio.create_task(leader.run()), asyncio.create_task(watcher.run(stop_watch))]
    accepted: dict[str, str] = {}
    refused: Counter[str] = Counter()
    killed_at = 0.0
    try:
        info = await jlog.js.stream_info(jlog.names.inbox_stream)
        assert info.cluster is not None and info.cluster.leader
        inbox_leader = next(n for n in cluster if n.server_name == info.cluster.leader)

        async with ApiServer(hook.url, ca_file=str(hook.ca)) as api:
            todo = iter(range(JOBS))

            async def submitter() -> None:
                nonlocal killed_at
                for i in todo:
                    try:
                        admitted = await api.create(user_job(i))
                    except (AdmissionFailed, OSError, TimeoutError) as err:  # refused: not stored, not owed
                        refused[type(err).__name__] += 1
                        continue
                    manager.emulator.put("batch", "v1", "jobs", admitted.obj)  # as the API server stores it
                    accepted[admitted.obj["metadata"]["uid"]] = admitted.obj["metadata"]["name"]
                    if len(accepted) == KILL_AFTER and not killed_at:
                        killed_at = time.monotonic()
                        await asyncio.to_thread(inbox_leader.kill)  # SIGKILL, under load

            await asyncio.gather(*(submitter() for _ in range(CONCURRENCY)))
        load_done = time.monotonic()
        await eventually(
            lambda: (
                all(leader.knows(u) for u in accepted) or Unmet(sum(not leader.knows(u) for u in accepted))
            ),
            timeout_s=120,
            what="every allowed job in the log (missing ones counted)",
        )
        settled = time.monotonic()
    finally:
        stop_watch.set()
        leader.stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        hook.stop()
        with contextlib.suppress(Exception):
            await jlog.close()

    assert killed_at, (
        f"the load ended before {KILL_AFTER} jobs were accepted ({len(accepted)}; refused {dict(refused)})"
    )
    twice = {
        accepted[u]: [s for _, s in leader.submitted[u]] for u in accepted if len(leader.submitted[u]) > 1
    }
    assert not twice, f"recorded more than once: {twice}"
    backfilled = [when for u in accepted for when, source in leader.submitted[u] if source == "watch"]
    print(
        f"\n{len(accepted)} allowed ({dict(refused) or 'none'} refused), {len(backfilled)} recorded by the backfill; "
        f"the last backfill {max(backfilled) - killed_at:.1f} s after the kill and "
        f"{max(backfilled) - load_done:.1f} s after the load ended (backfill_after_s {BACKFILL_AFTER_S:g})"
        if backfilled
        else f"\n{len(accepted)} allowed, none needed the backfill (every record made it within the publish bound)"
    )
    print(f"all {len(accepted)} in the log {settled - killed_at:.1f} s after the kill")
