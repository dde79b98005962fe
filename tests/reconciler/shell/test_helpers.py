"""The shell's pure helpers: subject filters, --until parsing, human lines, policy files, batch grouping."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import structlog

from eventlog import events as ev
from reconciler.commands.log import subject_matches
from reconciler.config import ConfigError, PolicyConfig, decode
from reconciler.edge import logging as klog
from reconciler.edge.logsource import parse_until
from reconciler.edge.progress import Progress
from reconciler.history.replay import DecisionBatch, units
from reconciler.offline.render import line
from reconciler.policy import load_policy_file, policy_event, same_policy
from reconciler.service.loop import _log_decision

JOB = ev.JobRef(namespace="team-a", name="train.v1", uid="u1")


@pytest.mark.parametrize(
    ("pattern", "subject", "expected"),
    [
        ("kd.log.>", "kd.log.job.submitted.team-a.x", True),
        ("kd.log.decision.>", "kd.log.job.submitted.team-a.x", False),
        ("kd.log.*.*.team-a.*", "kd.log.decision.placed.team-a.x", True),
        ("kd.log.*.*.team-a.*", "kd.log.cluster.lost.east", False),
        ("kd.log.cluster.lost.east", "kd.log.cluster.lost.east", True),
        ("kd.log.cluster.*", "kd.log.cluster.lost.east", False),
        ("kd.log.cluster.>", "kd.log.cluster", False),
    ],
)
def test_subject_filter_has_nats_wildcard_semantics(pattern: str, subject: str, expected: bool) -> None:
    assert subject_matches(pattern, subject) is expected


def test_until_accepts_a_sequence_or_a_time() -> None:
    assert parse_until("1234") == (1234, None)
    assert parse_until("2026-11-22T00:10:00Z") == (None, 1_795_306_200_000)
    assert parse_until("2026-11-22T01:10:00+01:00") == (None, 1_795_306_200_000)
    with pytest.raises(ValueError, match="log sequence"):
        parse_until("yesterday")


def test_human_line_shows_seq_time_type_subject_and_non_default_fields() -> None:
    entry = ev.LogEntry(
        seq=42,
        at_ms=1_795_306_200_123,
        event=ev.Nominated(job=JOB, clusters=["east", "west"], attempt=1),
        batch=(0, 2),
    )
    text = line(entry)
    assert text.split()[:4] == ["42", "2026-11-22T00:10:00.123Z", "Nominated", "team-a/train.v1"]
    assert "clusters=[east,west]" in text and "attempt=1" in text
    assert "round=" not in text  # default values are left out
    assert text.endswith("[1/2]")
    submitted = ev.JobSubmitted(job=JOB, pod_sets=[ev.PodSet(name="main", count=2, requests={"cpu": 500, "memory": 2 << 30})])
    assert "pod_sets=[main:2x{cpu:500m,memory:2Gi}]" in line(ev.LogEntry(seq=1, at_ms=0, event=submitted))


def test_policy_event_converts_durations_and_names() -> None:
    raw = {"workerLostTimeout": "90s", "profiles": [{"name": "gpu", "filters": ["ClusterHealth"], "scores": ["CapacityScore"], "roundTimeout": "2m"}]}
    policy = decode(raw, PolicyConfig)
    event = policy_event(policy)
    assert event.worker_lost_timeout_ms == 90_000
    assert event.profiles[0].filters == [ev.FilterSpec(name="ClusterHealth")]
    assert event.profiles[0].round_timeout_ms == 120_000
    assert same_policy(event, policy_event(policy))
    assert not same_policy(event, None)


def test_policy_file_may_be_a_config_a_policy_or_one_profile(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("policy:\n  claimTtl: 30s\n  profiles:\n    - name: default\n      filters: [ClusterHealth]\n")
    assert load_policy_file(config).claim_ttl_ms == 30_000
    profile = tmp_path / "profile.yaml"
    profile.write_text("name: spread\nstrategy: {type: AllAtOnce}\nscores: [CapacityScore]\n")
    loaded = load_policy_file(profile)
    assert [p.name for p in loaded.profiles] == ["spread", "default"]
    assert loaded.profiles[1].strategy.type == "AllAtOnce"
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nroundTimeout: soon\n")
    with pytest.raises(ConfigError, match="roundTimeout"):
        load_policy_file(bad)
    typo = tmp_path / "typo.yaml"
    typo.write_text("profiles:\n  - name: x\n    filterz: []\n")
    with pytest.raises(ConfigError, match="filterz"):
        load_policy_file(typo)


async def _iterate(entries: list[ev.LogEntry]) -> AsyncIterator[ev.LogEntry]:
    for entry in entries:
        yield entry


def _decision(seq: int, *, index: int, count: int) -> ev.LogEntry:
    return ev.LogEntry(seq=seq, at_ms=0, event=ev.Placed(job=JOB, cluster="east", attempt=1), batch=(index, count))


async def test_units_group_decision_batches_and_flag_short_ones() -> None:
    tick = ev.LogEntry(seq=1, at_ms=0, event=ev.Tick(), inbox_seq=None)
    log = [tick, _decision(2, index=0, count=2), _decision(3, index=1, count=2), _decision(4, index=0, count=3), _decision(5, index=1, count=3), tick, _decision(7, index=0, count=1)]
    got = [u async for u in units(_iterate(log))]
    assert [type(u).__name__ for u in got] == ["LogEntry", "DecisionBatch", "DecisionBatch", "LogEntry", "DecisionBatch"]
    full, short, single = (u for u in got if isinstance(u, DecisionBatch))
    assert full.complete and [e.seq for e in full.entries] == [2, 3]
    assert not short.complete and [e.seq for e in short.entries] == [4, 5]
    assert single.complete


def test_progress_is_silent_on_short_work_and_counts_tenths_on_long_work() -> None:
    short = io.StringIO()
    p = Progress(total=10, stream=short, threshold=100)
    for i in range(11):
        p.update(i)
    p.close()
    assert short.getvalue() == ""
    long = io.StringIO()
    p = Progress(total=1000, stream=long, threshold=100, label="replay")
    for i in range(0, 1001, 7):
        p.update(i)
    p.update(1000)
    p.close()
    lines = long.getvalue().splitlines()
    assert lines[-1] == "replay: 100% (1000/1000 entries)"
    assert len(lines) == len(set(lines)) <= 11  # one line per tenth, not one per update


def test_decision_log_lines_are_json_with_job_and_cluster() -> None:
    buf = io.StringIO()
    klog.configure(stream=buf, role="serve", replica="r1")
    try:
        requeued = ev.Requeued(job=JOB, reason="WorkerLost", cluster="east", message="east lost")
        _log_decision(ev.LogEntry(seq=3, at_ms=0, event=requeued))
    finally:
        structlog.reset_defaults()  # other tests in this process expect structlog as it was
    (record,) = [json.loads(ln) for ln in buf.getvalue().splitlines()]
    assert record["job"] == "team-a/train.v1" and record["cluster"] == "east"
    assert record["decision"] == "Requeued" and record["detail"] == "east lost"
    assert record["role"] == "serve" and record["replica"] == "r1" and record["level"] == "info"


def test_progress_goes_to_the_structured_log_when_given_one() -> None:
    with structlog.testing.capture_logs() as events:
        p = Progress(total=100, threshold=10, logger=structlog.get_logger("rebuild"), label="rebuild")
        p.update(50)
        p.update(100)
        p.close()
    assert [e["percent"] for e in events] == [50, 100]
    assert events[-1] == {"event": "progress", "task": "rebuild", "percent": 100, "done": 100, "total": 100, "log_level": "info"}


def test_placement_is_shown_as_a_person_writes_it() -> None:
    gpu = ev.MatchExpression(key="gpu", operator="In", values=["a100", "h100"])
    spec = ev.Placement(
        cluster_selector={"region": "west"},
        cluster_affinity=ev.ClusterAffinity(
            required=[ev.SelectorTerm(match_expressions=[gpu])],
            preferred=[ev.WeightedTerm(weight=60, term=ev.SelectorTerm(match_expressions=[gpu]))],
        ),
        cluster_tolerations=[ev.Toleration(key="spot", operator="Exists", effect="NoSchedule")],
        dispatch_mode="BestEffort",
    )
    entry = ev.LogEntry(seq=1, at_ms=0, event=ev.JobSubmitted(job=JOB, pod_sets=[], placement=spec))
    assert line(entry).endswith(
        "selector={region=west} affinity=(gpu In (a100,h100)) prefer=60:(gpu In (a100,h100))"
        " tolerates=[spot:Exists:NoSchedule] dispatch_mode=BestEffort"
    )
    assert "placement" not in line(ev.LogEntry(seq=1, at_ms=0, event=ev.JobSubmitted(job=JOB, pod_sets=[])))


def test_a_weighted_score_does_not_read_as_hexadecimal() -> None:
    """``CapacityScore 0x2`` read as the number 2 in hexadecimal; the weight is spelt out."""
    from reconciler.commands.explain import render_explanation
    from reconciler.core.explain import ClusterVerdict, JobExplanation, PluginScore

    x = JobExplanation(
        job="a/j", seq=1, phase="Nominated", profile="default", priority=0, attempt=0, nominated=["c"],
        clusters=[ClusterVerdict(cluster="c", feasible=True, total=0, rank=1,
                                 scores=[PluginScore(plugin="CapacityScore", weight=2, score=0)])],
    )
    [row] = [r for r in render_explanation(x) if "score" in r]
    assert "CapacityScore 0 (weight 2)" in row and "0x2" not in row
