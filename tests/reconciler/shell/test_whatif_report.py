"""``replay --profile`` on a real recorded log, through the CLI: the policy effect is told apart
from the what-if model's error, and a profile equal to the recorded policy has no effect at all."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import msgspec
import pytest
import structlog

from eventlog import events as ev
from eventlog.jsonl import JsonlLog
from reconciler.cli import main
from reconciler.offline.policydoc import effective, policy_document
from reconciler.offline.whatif import WhatIf, observe
from reconciler.policy import load_policy_file
from tests.reconciler.shell.test_whatif import nominated_past_deadline

FIXTURE = Path(__file__).parents[2] / "fixtures" / "demo-4e2c1d6.jsonl.gz"


def kd(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    try:
        code = main([*argv, "--file", str(FIXTURE)])
    finally:
        structlog.reset_defaults()  # the command configured logging for itself, not for other tests
    return code, capsys.readouterr().out


def _entries() -> list[ev.LogEntry]:
    async def read() -> list[ev.LogEntry]:
        return [entry async for chunk in JsonlLog(FIXTURE).read() for entry in chunk]

    return asyncio.run(read())


def _recorded_policy_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> Path:
    code, out = kd(capsys, "replay", "--show-policy")
    assert code == 0, out
    path = tmp_path / "recorded.yaml"
    path.write_text(out)
    return path


def test_show_policy_writes_the_recorded_policy_back_as_a_profile_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = _recorded_policy_file(capsys, tmp_path)
    seen = asyncio.run(observe(JsonlLog(FIXTURE), until_seq=None, until_ms=None))
    assert seen.policy is not None
    # Read back by --profile's own loader: the same policy (plugin provenance aside).
    assert load_policy_file(path) == effective(msgspec.structs.replace(seen.policy, plugins=None))


def test_a_policy_document_round_trips_with_every_kind_of_field(tmp_path: Path) -> None:
    policy = ev.PolicyLoaded(
        profiles=[
            ev.Profile(
                name="inc",
                filters=[ev.FilterSpec(name="ClusterHealth"), ev.FilterSpec(name="ClusterSelector", args={"x": 1})],
                scores=[ev.ScoreSpec(name="CapacityScore", weight=3), ev.ScoreSpec(name="ClusterTaintScore")],
                strategy=ev.StrategySpec(type="Incremental", step_size=2),
                round_timeout_ms=1_500,
                dispatch_mode="BestEffort",
            ),
            ev.Profile(name="default", strategy=ev.StrategySpec(type="AllAtOnce"), round_timeout_ms=90 * 60_000),
        ],
        priority_classes={"high": 1000},
        worker_lost_timeout_ms=250,
        claim_ttl_ms=2 * 3_600_000,
        requeue_backoff_ms=0,
    )
    path = tmp_path / "p.yaml"
    path.write_text(policy_document(policy, header="two lines\nof header"))
    assert load_policy_file(path) == effective(policy)


def test_the_recorded_policy_as_profile_has_exactly_zero_policy_effect(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = _recorded_policy_file(capsys, tmp_path)
    code, out = kd(capsys, "replay", "--profile", str(path), "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["baseline_policy"] == "the recorded policy"
    assert doc["baseline"] == doc["whatif"]
    effect = doc["policy_effect"]
    assert effect["changed"] == []
    figures = {k: v for k, v in effect["figures"].items() if k != "placements_per_cluster"}
    assert set(figures.values()) == {0}
    assert set(effect["figures"]["placements_per_cluster"].values()) == {0}
    # The model's own error is reported apart: the log's real figures beside the model's run.
    error = doc["model_error"]
    assert error["recorded"]["jobs"] == 200 and error["recorded"]["finished"] == 200
    # What the log records, not what the model did: 30 victims evicted, asked for by 24 claims.
    assert (error["recorded"]["preemptions"], error["recorded"]["preemption_claims"]) == (30, 24)
    placed = Counter(e.event.cluster for e in _entries() if isinstance(e.event, ev.Placed))
    assert error["recorded"]["placements_per_cluster"] == dict(placed)

    code, out = kd(capsys, "replay", "--profile", str(path))
    assert code == 0
    assert "no policy effect: every job and every figure comes out the same" in out
    effect_part, error_part = out.split("MODEL ERROR")
    assert "POLICY EFFECT" in effect_part and "the log" in error_part


def test_another_policy_shows_its_effect_against_the_same_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    recorded = _recorded_policy_file(capsys, tmp_path)
    everywhere = tmp_path / "everywhere.yaml"
    text = recorded.read_text()
    assert "strategy: {type: TopK, k: 1, nominated_hold: all}" in text
    everywhere.write_text(text.replace("strategy: {type: TopK, k: 1, nominated_hold: all}", "strategy: {type: AllAtOnce}"))
    code, out = kd(capsys, "replay", "--profile", str(everywhere), "--json")
    assert code == 0, out
    doc = json.loads(out)
    effect = doc["policy_effect"]
    # AllAtOnce copies a job to every cluster it fits: more copies than the same model's TopK-1.
    assert effect["figures"]["remote_copies_per_job"] > 0
    assert effect["changed"]
    assert doc["baseline"] == json.loads(kd(capsys, "replay", "--profile", str(recorded), "--json")[1])["baseline"]


def test_no_job_is_left_nominated_under_all_at_once_with_a_short_round_timeout(tmp_path: Path) -> None:
    """The demo log under AllAtOnce, roundTimeout 10 s: east-a100 is silent (lost) for 15 s, and a
    copy nominated to it then must be created when it answers again, as the live actuator does."""
    seen = asyncio.run(observe(JsonlLog(FIXTURE), until_seq=None, until_ms=None))
    assert seen.policy is not None
    profile = msgspec.structs.replace(
        seen.policy.profiles[0], strategy=ev.StrategySpec(type="AllAtOnce"), round_timeout_ms=10_000
    )
    run = WhatIf(seen, msgspec.structs.replace(seen.policy, profiles=[profile], worker_lost_timeout_ms=60_000))
    run.run()
    phases = Counter(job.phase for job in run.state.jobs.values())
    assert phases["Nominated"] == 0, phases


def test_every_round_ends_at_its_deadline_in_the_what_if() -> None:
    """The recorded policy with roundTimeout 400 ms, shorter than many simulated admissions: in
    the what-if as in the live loop, a Tick at each deadline ends the round (withdrawn, next
    round), not the next input that happens to come along."""
    seen = asyncio.run(observe(JsonlLog(FIXTURE), until_seq=None, until_ms=None))
    assert seen.policy is not None
    profiles = [msgspec.structs.replace(p, round_timeout_ms=400) for p in seen.policy.profiles]
    run = WhatIf(seen, msgspec.structs.replace(seen.policy, profiles=profiles))
    run.run()
    timeouts = [e for e in run.log if isinstance(e.event, ev.Withdrawn) and "AdmissionTimeout" in e.event.reason]
    assert len(timeouts) > 10
    assert nominated_past_deadline(run) == []


def test_show_policy_refuses_what_it_cannot_combine_with(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["replay", "--show-policy", "--verify", "--file", str(FIXTURE)])
    finally:
        structlog.reset_defaults()
    assert code == 2
    assert "--show-policy prints a policy file; it does not go with --verify" in capsys.readouterr().err


def test_a_single_profile_is_tried_on_the_recorded_policy(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The recorded default profile on its own: its timeouts and priority classes come from the
    recorded policy (not the config's defaults: workerLostTimeout 60 s instead of 4 s would be an
    effect the file never asked for), so the effect is zero."""
    profile = tmp_path / "default.yaml"
    profile.write_text(
        "name: default\n"
        "filters: [ClusterHealth, ClusterPinning, ClusterSelector, ClusterAffinity, ClusterTaints,\n"
        "          ClusterFeasibility, ClusterHeadroom]\n"
        "scores: [{name: ClusterAffinityScore, weight: 2}, ClusterTaintScore, CapacityScore]\n"
        "roundTimeout: 10s\n"
    )
    code, out = kd(capsys, "replay", "--profile", str(profile), "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["profile_on_recorded_policy"] is True
    assert doc["policy_effect"]["changed"] == [] and doc["baseline"] == doc["whatif"]
    code, out = kd(capsys, "replay", "--profile", str(profile))
    assert "is one profile: tried on the recorded policy" in out
