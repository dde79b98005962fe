"""``kdispatch serve`` on a 3-node NATS cluster loses the server it is connected to.

The node killed is also the JetStream meta leader (the one that creates consumers), the worst
case: the client reconnects to a survivor at once, but every request in flight on the dead node
is lost, and the cluster needs a few seconds to elect a new meta leader. Sequencing must resume
within seconds, not wait out requests that will never be answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from eventlog import events as ev
from eventlog.jetstream import JetStreamLog, connect
from tests.eventlog.cluster import meta_leader, three_nodes
from tests.waiting import eventually

from .scenario import decisions_of, publish_clusters, read_all, submission

CONFIG = """\
nats:
  replicas: 3
policy:
  workerLostTimeout: 10m
  profiles:
    - name: default
      filters: [ClusterHealth, ClusterFeasibility, ClusterHeadroom]
      scores: [CapacityScore]
      strategy: {type: TopK, k: 1}
"""

RESUME_BOUND_S = 15.0


async def _until(
    jlog: JetStreamLog, check: Callable[[list[ev.LogEntry]], bool], *, timeout_s: float, what: str
) -> list[ev.LogEntry]:
    """Poll the log (through NATS errors: the observer's reads fail over too) until ``check``."""
    seen: list[list[ev.LogEntry]] = [[]]

    async def attempt() -> bool:
        seen[0] = await asyncio.wait_for(read_all(jlog), 2.0)
        return check(seen[0])

    # any error: the observer's own requests may hit the dead node
    await eventually(attempt, timeout_s=timeout_s, interval_s=0.1, ignoring=(Exception,), what=what)
    return seen[0]


def _nominated(entries: list[ev.LogEntry]) -> set[str]:
    return {e.event.job.uid for e in decisions_of(entries, ev.Nominated)}  # type: ignore[attr-defined]


async def test_sequencing_resumes_soon_after_the_connected_server_dies(tmp_path: Path) -> None:
    config = tmp_path / "kdispatch.yaml"
    config.write_text(CONFIG)
    output = tmp_path / "serve.log"
    with three_nodes(tmp_path) as nodes:
        victim = meta_leader(nodes)
        survivors = [n for n in nodes if n is not victim]
        observer = await connect(",".join(n.url for n in survivors), replicas=3, root="kd")
        with output.open("wb") as out:
            # Only the victim's URL, as behind a Service: the client learns the others from it.
            argv = ["serve", "--nats", victim.url, "--config", str(config), "--no-actuator", "--leader-id", "A"]
            proc = subprocess.Popen(
                [sys.executable, "-m", "reconciler", *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            await publish_clusters(observer)
            await observer.inbox.publish(submission(0), msg_id="submit/0")
            await _until(observer, lambda es: "uid-0" in _nominated(es), timeout_s=60, what="first decision")

            victim.kill()
            # Published through the survivors right after the kill (retried while the inbox
            # stream elects a new leader, if it was on the victim).
            await eventually(
                lambda: observer.inbox.publish(submission(1), msg_id="submit/1", timeout_s=1.0),
                timeout_s=60,
                interval_s=0.1,
                ignoring=(Exception,),
                what="a publish through the survivors",
            )
            entries = await _until(
                observer,
                lambda es: "uid-1" in _nominated(es),
                timeout_s=RESUME_BOUND_S,
                what="sequencing after the connected server died",
            )
            assert proc.poll() is None  # the same process leads on, it did not crash
            assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
            assert {e.leader for e in entries} == {"A"}
        except AssertionError as err:
            raise AssertionError(f"{err}\n--- serve output (end) ---\n{output.read_text()[-6000:]}") from None
        finally:
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=20)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            await observer.close()
