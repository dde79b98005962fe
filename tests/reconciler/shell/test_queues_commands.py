"""``--queues`` on simulate, demo and replay (what-if), through the CLI's entry point."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import msgspec
import pytest
import structlog

from eventlog import events as ev
from eventlog.jsonl import JsonlLog
from eventlog.kube.kueue import load_queues
from reconciler.cli import main
from reconciler.offline.whatif import WhatIf, observe
from tests.paths import REPO, TRACES

EXAMPLE = REPO / "deploy" / "examples" / "three-teams.yaml"
FIXTURE = REPO / "tests" / "fixtures" / "demo-4e2c1d6.jsonl.gz"
TIRESIAS = TRACES / "tiresias-sample" / "60_job.csv"
TOPK1 = "name: topk-1\nfilters: [ClusterHealth, ClusterFeasibility, ClusterHeadroom]\nscores: [CapacityScore]\nstrategy: {type: TopK, k: 1}\n"


def _entries(path: Path) -> list[ev.LogEntry]:
    async def read() -> list[ev.LogEntry]:
        return [entry async for chunk in JsonlLog(path).read() for entry in chunk]

    return asyncio.run(read())


@pytest.fixture
def bad_queues(tmp_path: Path) -> Path:
    path = tmp_path / "queues.yaml"
    path.write_text(EXAMPLE.read_text().replace('weight: "2"', 'weight: "-2"'))
    return path


def _run(*argv: str) -> int:
    try:
        return main(list(argv))
    finally:
        structlog.reset_defaults()  # a command configures logging for itself, not for other tests


def test_simulate_records_the_queues_at_the_start_of_each_run(tmp_path: Path) -> None:
    profile = tmp_path / "topk1.yaml"
    profile.write_text(TOPK1)
    out = tmp_path / "out"
    argv = ["simulate", "--trace", str(TIRESIAS), "--profile", str(profile), "--limit", "6"]
    assert _run(*argv, "--queues", str(EXAMPLE), "--out", str(out), "--save-logs", "--quiet") == 0
    entries = _entries(out / "log-topk-1.jsonl.gz")
    assert isinstance(entries[0].event, ev.PolicyLoaded)
    assert entries[1].event == load_queues(EXAMPLE)
    assert sum(isinstance(e.event, ev.QueuesConfigured) for e in entries) == 1


@pytest.mark.parametrize("command", ["simulate", "demo", "replay"])
def test_an_invalid_queue_configuration_is_refused_with_its_field(
    command: str, bad_queues: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = {
        "simulate": ["--trace", str(TIRESIAS), "--limit", "3", "--quiet"],
        "demo": ["--fast", "--data-dir", str(bad_queues.parent / "demo")],
        "replay": ["--file", str(FIXTURE)],
    }[command]
    assert _run(command, *extra, "--queues", str(bad_queues)) == 2
    err = capsys.readouterr().err
    assert "ClusterQueue/research: $.spec.fairSharing.weight: '-2' is negative" in err
    assert not (bad_queues.parent / "demo").exists()  # the demo refused before starting anything


def test_replay_queues_is_a_what_if_run_under_that_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run("replay", "--file", str(FIXTURE), "--queues", str(EXAMPLE), "--json") == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["queues"] == str(EXAMPLE)
    assert doc["baseline"]["jobs"] == doc["whatif"]["jobs"]  # the same outside inputs, both runs


def test_the_what_if_run_replaces_the_logs_queue_configuration() -> None:
    seen = asyncio.run(observe(JsonlLog(FIXTURE), until_seq=None, until_ms=None))
    recorded = ev.QueuesConfigured(source="the log's", flavors=["x"])
    first = seen.inputs[0]
    seen.queues.append(ev.LogEntry(seq=first.seq, at_ms=first.at_ms, event=recorded))
    mine = load_queues(EXAMPLE)

    def configured(run: WhatIf) -> list[ev.QueuesConfigured]:
        return [e.event for e in run.log if isinstance(e.event, ev.QueuesConfigured)]

    as_recorded = WhatIf(seen, None)
    as_recorded.run()
    assert configured(as_recorded) == [recorded]  # followed, at its time
    instead = WhatIf(seen, None, queues=mine)
    instead.run()
    assert configured(instead) == [mine]  # from the start, and the log's left out
    assert instead.log[0].event == mine
    assert msgspec.structs.replace(mine, source="") != recorded
