"""The queue configuration in the log: recorded by the leader when it changes (``--queues``), kept
across snapshots, refused at start-up when invalid (``serve --queues``)."""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from pathlib import Path

import msgspec

from eventlog import events as ev
from eventlog.jetstream import JetStreamLog
from eventlog.kube.kueue import load_queues
from reconciler.edge.logging import get_logger
from reconciler.history.rebuild import decode_snapshot, rebuild_state
from reconciler.service.loop import LeaderLoop, LoopSettings, wait_ready
from tests.paths import REPO

from .scenario import POLICY, read_all

EXAMPLE = REPO / "deploy" / "examples" / "three-teams.yaml"


async def _term(
    jlog: JetStreamLog, leader: str, queues: ev.QueuesConfigured | None, *, snapshot_every: int = 5_000
) -> LeaderLoop:
    settings = LoopSettings(
        leader_id=leader, policy=POLICY, queues=queues, idle_wait_s=0.02, snapshot_every=snapshot_every
    )
    loop = LeaderLoop(jlog, settings)
    stop = asyncio.Event()
    term = asyncio.create_task(loop.run_term(stop=stop))
    await wait_ready(loop, timeout_s=20)
    stop.set()
    assert await term == "stopped"
    return loop


async def test_queues_are_recorded_only_when_they_change(jslog: JetStreamLog, tmp_path: Path) -> None:
    queues = load_queues(EXAMPLE)
    await _term(jslog, "A", None)  # no --queues: nothing recorded (tenancy off, as today)
    await _term(jslog, "B", queues)
    # the same objects from elsewhere (another path, or the manager): nothing new
    await _term(jslog, "C", msgspec.structs.replace(queues, source=str(tmp_path / "copy.yaml")))
    await _term(jslog, "D", None)  # no --queues again: the log's configuration stays in force
    changed = msgspec.structs.replace(queues, priority_classes={**queues.priority_classes, "low": 1})
    await _term(jslog, "E", changed)
    recorded = [e for e in await read_all(jslog) if isinstance(e.event, ev.QueuesConfigured)]
    assert [(e.leader, e.event) for e in recorded] == [("B", queues), ("E", changed)]
    assert all(e.inbox_seq is None for e in recorded)


async def test_a_snapshot_carries_the_queues_in_force(jslog: JetStreamLog) -> None:
    queues = load_queues(EXAMPLE)
    loop = await _term(jslog, "A", queues, snapshot_every=1)
    await loop._snapshot(get_logger("test"))
    await loop.snapshot_stored()
    found = await jslog.snapshots.latest(at_or_before=loop.last_seq)
    assert found is not None
    assert decode_snapshot(found[1]).queues == queues
    folded = await rebuild_state(jslog.reader, jslog.snapshots)
    assert folded.snapshot_seq == loop.last_seq and folded.queues == queues
    # the next leader, from that snapshot, sees the same configuration: it records nothing
    await _term(jslog, "B", queues)
    assert sum(isinstance(e.event, ev.QueuesConfigured) for e in await read_all(jslog)) == 1


def test_serve_refuses_an_invalid_queue_configuration_and_names_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "queues.yaml"
    bad.write_text(EXAMPLE.read_text().replace("nominalQuota: 48", "nominalQuota: -48"))
    proc = subprocess.run(
        [sys.executable, "-m", "reconciler", "serve", "--queues", str(bad), "--nats", "nats://127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "invalid queue configuration" in proc.stderr
    assert (
        "ClusterQueue/research: $.spec.resourceGroups[0].flavors[0].resources[0].nominalQuota" in proc.stderr
    )
    assert "negative" in proc.stderr
    assert "cannot open the log" not in proc.stderr  # refused before anything was touched


def test_serve_reads_queues_from_the_config_file_too(tmp_path: Path) -> None:
    bad = tmp_path / "queues.yaml"
    bad.write_text(
        "apiVersion: kueue.x-k8s.io/v1beta2\nkind: LocalQueue\nmetadata: {name: q}\nspec: {clusterQueue: nope}\n"
    )
    config = tmp_path / "kdispatch.yaml"
    config.write_text(f"queues: {bad}\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "reconciler",
            "serve",
            "--config",
            str(config),
            "--nats",
            "nats://127.0.0.1:1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert "LocalQueue/default/q: $.spec.clusterQueue: no ClusterQueue named 'nope'" in proc.stderr


async def test_serve_records_the_queues_given(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    argv = [
        sys.executable,
        "-m",
        "reconciler",
        "serve",
        "--queues",
        str(EXAMPLE),
        "--data-dir",
        str(data_dir),
    ]
    proc = subprocess.Popen(
        [*argv, "--no-actuator", "--leader-id", "solo"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )

    def kd(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "reconciler", *args, "--data-dir", str(data_dir)],
            capture_output=True,
            text=True,
            timeout=60,
        )

    loop = asyncio.get_running_loop()
    try:
        end = loop.time() + 30
        while True:
            if (data_dir / "nats.url").exists():
                shown = await loop.run_in_executor(None, kd, "log")
                if "QueuesConfigured" in shown.stdout:
                    break
            assert proc.poll() is None and loop.time() < end, "serve did not record the queues"
            await asyncio.sleep(0.2)
    finally:
        proc.terminate()
        await loop.run_in_executor(None, proc.wait)
    assert proc.returncode == 0


def test_serve_passes_the_queues_on_to_the_webhook_child() -> None:
    from reconciler.commands.serve import _webhook_argv, add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--webhook", "--queues", "q.yaml"])
    argv = _webhook_argv(args, nats_url="nats://x:1", data_dir="d", queues=args.queues)
    assert argv[argv.index("--queues") + 1] == "q.yaml"
    assert "--queues" not in _webhook_argv(args, nats_url="nats://x:1", data_dir="d", queues=None)
