"""``kdispatch serve`` as a real process: failover under load, metrics, config errors, SIGTERM."""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from eventlog import events as ev
from eventlog.embedded import free_port
from eventlog.jetstream import JetStreamLog
from reconciler.history.replay import DecisionBatch, units
from tests.waiting import Unmet, eventually

from .scenario import admit, decisions_of, publish_clusters, read_all, submission, wait_for

CONFIG = """\
policy:
  workerLostTimeout: 10m
  profiles:
    - name: default
      filters: [ClusterHealth, ClusterSelector, ClusterFeasibility, ClusterHeadroom]
      scores: [CapacityScore]
      strategy: {type: TopK, k: 1}
"""


def serve(url: str, root: str, *extra: str, config: Path, leader: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "reconciler", "serve", "--nats", url, "--root", root, "--config", str(config)]
    return subprocess.Popen(
        [*argv, "--leader-id", leader, "--lease-ttl", "1", "--no-actuator", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "kdispatch.yaml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
async def procs() -> AsyncIterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


async def _worker(jlog: JetStreamLog, stop: asyncio.Event) -> None:
    """Plays the worker clusters: admits every nominated copy on its first cluster."""
    done: set[tuple[str, int]] = set()
    while not stop.is_set():
        for e in decisions_of(await read_all(jlog), ev.Nominated):
            n = e.event
            assert isinstance(n, ev.Nominated)
            if (n.job.uid, n.attempt) not in done:
                done.add((n.job.uid, n.attempt))
                await admit(jlog, n, cluster=n.clusters[0])
        await asyncio.sleep(0.05)


async def _wait_exit(proc: subprocess.Popen[bytes], timeout_s: float) -> int:
    loop = asyncio.get_running_loop()
    return await asyncio.wait_for(loop.run_in_executor(None, proc.wait), timeout_s)


async def test_failover_kill_the_leader_mid_load(
    jslog: JetStreamLog, nats_url: str, log_root: str, config: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    jobs = 60
    a = serve(nats_url, log_root, config=config, leader="A")
    procs.append(a)
    await wait_for(jslog, lambda es: any(e.leader == "A" for e in es), timeout_s=30)
    b = serve(nats_url, log_root, config=config, leader="B")
    procs.append(b)
    stop = asyncio.Event()
    worker = asyncio.create_task(_worker(jslog, stop))
    try:
        await publish_clusters(jslog, scale=20)  # room for every job: none waits for capacity
        for i in range(jobs):
            await jslog.inbox.publish(submission(i, gpus=1 + i % 2), msg_id=f"submit/{i}")
            if i == jobs // 3:
                # Kill -9 the leader once it is busy deciding.
                await wait_for(jslog, lambda es: len(decisions_of(es, ev.Placed)) >= 5)
                a.send_signal(signal.SIGKILL)
        entries = await wait_for(jslog, lambda es: len({e.event.job.uid for e in decisions_of(es, ev.Placed)}) >= jobs, timeout_s=60)  # type: ignore[attr-defined]
    finally:
        stop.set()
        await worker

    leaders = [e.leader for e in entries]
    assert "A" in leaders and "B" in leaders
    assert leaders.index("B") > max(i for i, name in enumerate(leaders) if name == "A")  # B took over; A never came back
    # Nothing twice: every inbox entry once, every job placed once per attempt, nominations unique.
    inbox = [e.inbox_seq for e in entries if e.inbox_seq is not None]
    assert len(inbox) == len(set(inbox))
    placed = collections.Counter((e.event.job.uid, e.event.attempt) for e in decisions_of(entries, ev.Placed))  # type: ignore[attr-defined]
    assert max(placed.values()) == 1 and len(placed) == jobs
    nominated = collections.Counter(
        (e.event.job.uid, e.event.attempt, e.event.round) for e in decisions_of(entries, ev.Nominated)  # type: ignore[attr-defined]
    )
    assert max(nominated.values()) == 1
    submitted = [e for e in entries if isinstance(e.event, ev.JobSubmitted)]
    assert len(submitted) == jobs

    async def each() -> AsyncIterator[ev.LogEntry]:
        for e in entries:
            yield e

    batches = [u async for u in units(each()) if isinstance(u, DecisionBatch)]
    assert batches and all(b.complete for b in batches)

    verify = subprocess.run(
        [sys.executable, "-m", "reconciler", "replay", "--verify", "--nats", nats_url, "--root", log_root],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "all identical" in verify.stdout

    b.send_signal(signal.SIGTERM)
    assert await _wait_exit(b, 20) == 0


async def test_sigterm_hands_over_at_once_and_metrics_show_the_leader(
    jslog: JetStreamLog, nats_url: str, log_root: str, config: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    port_a, port_b = free_port(), free_port()
    a = serve(nats_url, log_root, "--metrics-port", str(port_a), "--lease-ttl", "30", config=config, leader="A")
    procs.append(a)
    await wait_for(jslog, lambda es: any(e.leader == "A" for e in es), timeout_s=30)
    b = serve(nats_url, log_root, "--metrics-port", str(port_b), "--lease-ttl", "30", config=config, leader="B")
    procs.append(b)
    assert await _metric(port_a, "kdispatch_leader") == 1.0
    assert _get(port_a, "/readyz") == (200, "ready\n") and _get(port_a, "/healthz")[0] == 200
    assert await _metric(port_b, "kdispatch_leader") == 0.0
    a.send_signal(signal.SIGTERM)
    assert await _wait_exit(a, 20) == 0
    # A released the lease on the way out: B leads without waiting for the 30 s TTL.
    await publish_clusters(jslog)
    entries = await wait_for(jslog, lambda es: any(isinstance(e.event, ev.ClusterRegistered) for e in es), timeout_s=15)
    assert {e.leader for e in entries if isinstance(e.event, ev.ClusterRegistered)} == {"B"}
    assert await _metric(port_b, "kdispatch_leader") == 1.0
    assert await _metric(port_b, 'kdispatch_inputs_total{type="ClusterRegistered"}') == 2.0
    # Everything published was sequenced: the lag (re-measured every 2 s) comes back to 0.
    assert await _metric(port_b, "kdispatch_inbox_lag", until=0.0) == 0.0


def _get(port: int, path: str) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
        return resp.status, resp.read().decode()


async def _metric(port: int, name: str, *, until: float | None = None) -> float:
    """The metric's value (the first one seen, or once it equals ``until``)."""
    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            return str(resp.read().decode())

    async def value() -> Any:
        rows = [r for r in (await asyncio.to_thread(scrape)).splitlines() if r.split(" ")[0] == name]
        values = [float(r.rsplit(" ", 1)[1]) for r in rows]
        wanted = [v for v in values if until is None or v == until]
        return (wanted[0],) if wanted else Unmet(f"{name} = {values}")  # a tuple: 0.0 is a value

    found = await eventually(
        value, timeout_s=20, interval_s=0.1, ignoring=(OSError,), what=f"{name} on :{port}/metrics"
    )
    return float(found[0])


def test_invalid_config_stops_start_up_with_the_field_path(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("policy:\n  profiles:\n    - name: x\n      roundTimeout: soon\n")
    proc = subprocess.run(
        [sys.executable, "-m", "reconciler", "serve", "--config", str(bad), "--nats", "nats://127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert proc.returncode == 2
    assert "invalid config" in proc.stderr and "roundTimeout" in proc.stderr


async def test_commands_read_the_embedded_log_in_the_data_dir_during_and_after_serve(tmp_path: Path, config: Path) -> None:
    data_dir = tmp_path / "data"
    argv = [sys.executable, "-m", "reconciler", "serve", "--config", str(config), "--data-dir", str(data_dir)]
    proc = subprocess.Popen(
        [*argv, "--no-actuator", "--leader-id", "solo"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url_file = data_dir / "nats.url"

    def kd(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "reconciler", *argv, "--data-dir", str(data_dir)],
            capture_output=True,
            text=True,
            timeout=60,
        )

    try:
        async def logged_policy() -> Any:
            assert proc.poll() is None, f"serve exited with {proc.returncode}"
            if not url_file.exists():
                return Unmet(f"no {url_file}")
            during = await asyncio.to_thread(kd, "log")
            return during if "PolicyLoaded" in during.stdout else Unmet(during.stdout[-300:])

        # serve started its own nats-server on the data dir and recorded the policy
        during = await eventually(logged_policy, timeout_s=30, interval_s=0.2, what="serve's PolicyLoaded in `log`")
        assert during.stdout.split()[:1] == ["1"] and "solo" not in during.stderr
        proc.send_signal(signal.SIGTERM)
        assert await _wait_exit(proc, 30) == 0
        assert not url_file.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # serve is gone: the command starts the embedded server on the store itself.
    after = await asyncio.get_running_loop().run_in_executor(None, kd, "replay", "--verify")
    assert after.returncode == 0, after.stderr
    assert "replayed 1 entries" in after.stdout


def test_an_unknown_plugin_stops_start_up_with_its_path(tmp_path: Path) -> None:
    typo = tmp_path / "typo.yaml"
    typo.write_text("policy:\n  profiles:\n    - name: default\n      filters: [ClusterHealth, ClusterSelecter]\n")
    proc = subprocess.run(
        [sys.executable, "-m", "reconciler", "serve", "--config", str(typo), "--nats", "nats://127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "filters[1]" in proc.stderr and "unknown plugin 'ClusterSelecter'" in proc.stderr
    assert "ClusterSelector" in proc.stderr  # the names it knows, to pick the right one
