"""``kdispatch log / replay / explain`` through the real entry point, on a log the real loop wrote."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
import structlog

from eventlog import codec
from eventlog import events as ev
from eventlog.jetstream import connect
from eventlog.store import InboxItem
from reconciler.cli import main
from reconciler.service.loop import LeaderLoop, LoopSettings, wait_ready

from .scenario import GPU, POLICY, Scenario, admit, decisions_of, delete_log, run_scenario, wait_for


@pytest.fixture(scope="module")
def recorded(nats_server: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Scenario]]:
    """One scenario log shared by the read-only tests of this module: (url, root, scenario)."""
    url = nats_server.url  # type: ignore[attr-defined]
    root = "tcli" + os.urandom(4).hex()
    scenario = asyncio.run(run_scenario(url, root, jobs=4))
    yield url, root, scenario
    asyncio.run(delete_log(url, root))


def kd(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    try:
        code = main(list(argv))
    finally:
        structlog.reset_defaults()  # the command configured logging for itself, not for other tests
    return code, capsys.readouterr().out


def test_log_prints_one_human_line_per_entry(recorded: tuple[str, str, Scenario], capsys: pytest.CaptureFixture[str]) -> None:
    url, root, scenario = recorded
    code, out = kd(capsys, "log", "--nats", url, "--root", root)
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == scenario.last_seq
    assert lines[0].split()[0] == "1" and "PolicyLoaded" in lines[0]
    assert any("JobSubmitted" in ln and "team-a/job-0" in ln and "nvidia.com/gpu:6" in ln for ln in lines)
    assert any("Placed" in ln and "team-a/job-0" in ln and "cluster=east" in ln for ln in lines)


def test_log_json_and_subject_filter(recorded: tuple[str, str, Scenario], capsys: pytest.CaptureFixture[str]) -> None:
    url, root, scenario = recorded
    code, out = kd(capsys, "log", "--nats", url, "--root", root, "--json")
    assert code == 0
    entries = [codec.decode_entry(ln.encode()) for ln in out.splitlines()]
    assert [e.seq for e in entries] == list(range(1, scenario.last_seq + 1))
    code, out = kd(capsys, "log", "--nats", url, "--root", root, "--subject", "kd.log.decision.placed.>")
    assert code == 0
    assert len(out.splitlines()) == len(scenario.jobs)
    assert all(" Placed " in ln for ln in out.splitlines())
    code, out = kd(capsys, "log", "--nats", url, "--root", root, "--job", "team-a/job-0")
    kinds = [ln.split()[2] for ln in out.splitlines()]
    assert kinds == ["JobSubmitted", "Nominated", "RemoteCreated", "RemoteAdmitted", "Placed"]
    code, out = kd(capsys, "log", "--nats", url, "--root", root, "-n", "2")
    assert [ln.split()[0] for ln in out.splitlines()] == [str(scenario.last_seq - 1), str(scenario.last_seq)]


def test_replay_verify_passes_on_the_loop_log(recorded: tuple[str, str, Scenario], capsys: pytest.CaptureFixture[str]) -> None:
    url, root, _ = recorded
    code, out = kd(capsys, "replay", "--verify", "--nats", url, "--root", root)
    assert code == 0, out
    assert "all identical" in out


def test_replay_json_is_the_final_state(recorded: tuple[str, str, Scenario], capsys: pytest.CaptureFixture[str]) -> None:
    url, root, scenario = recorded
    code, out = kd(capsys, "replay", "--json", "--nats", url, "--root", root)
    assert code == 0
    doc = json.loads(out)
    assert doc["seq"] == scenario.last_seq
    for key, cluster in scenario.placed.items():
        assert doc["jobs"][key]["phase"] == "Placed" and doc["jobs"][key]["cluster"] == cluster
    assert set(doc["clusters"]) == {"east", "west"}
    # --until SEQ: the state before anything was placed.
    code, out = kd(capsys, "replay", "--json", "--until", "12", "--nats", url, "--root", root)
    early = json.loads(out)
    assert early["seq"] == 12
    assert all(j["phase"] != "Placed" for j in early["jobs"].values())


def test_explain_shows_every_decision_and_every_cluster(recorded: tuple[str, str, Scenario], capsys: pytest.CaptureFixture[str]) -> None:
    url, root, _ = recorded
    code, out = kd(capsys, "explain", "team-a/job-0", "--nats", url, "--root", root)
    assert code == 0, out
    assert out.startswith("job team-a/job-0: now Placed on east")
    assert "Nominated" in out and "Placed" in out
    # The nomination's evaluation names both clusters: west is filtered (too small for 6 GPUs).
    table = out[out.index("Nominated") :]
    assert "east" in table and "west" in table
    code, out = kd(capsys, "explain", "team-a/job-0", "--json", "--nats", url, "--root", root)
    doc = json.loads(out)
    kinds = [e["event"]["type"] for d in doc["decisions"] for e in d["entries"]]
    assert kinds[:1] == ["Nominated"] and "Placed" in kinds
    assert doc["decisions"][0]["explanation"] is not None
    code, _ = kd(capsys, "explain", "team-a/nobody", "--nats", url, "--root", root)
    assert code == 1


def test_verify_detects_a_tampered_decision_in_an_export(
    recorded: tuple[str, str, Scenario], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url, root, _ = recorded
    code, out = kd(capsys, "log", "--json", "--nats", url, "--root", root)
    export = tmp_path / "log.jsonl"
    export.write_text(out)
    assert kd(capsys, "replay", "--verify", "--file", str(export))[0] == 0
    # Move job-1's placement to the other cluster, as a bug or a hand edit would.
    lines = out.splitlines()
    for i, ln in enumerate(lines):
        entry = codec.decode_entry(ln.encode())
        if isinstance(entry.event, ev.Placed) and entry.event.job.name == "job-1":
            forged = msgspec.structs.replace(entry, event=msgspec.structs.replace(entry.event, cluster="east"))
            lines[i] = codec.encode(forged).decode()
            break
    else:
        raise AssertionError("no Placed for job-1")
    export.write_text("\n".join(lines) + "\n")
    code, out = kd(capsys, "replay", "--verify", "--file", str(export))
    assert code == 1
    assert "MISMATCH" in out
    assert '"cluster":"east"' in out.split("recorded  :")[1].splitlines()[0]
    assert '"cluster":"west"' in out.split("recomputed:")[1].splitlines()[0]


def test_verify_detects_a_wrong_decision_appended_to_the_nats_log(
    nats_url: str, log_root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(run_scenario(nats_url, log_root, jobs=2))

    async def append_wrong() -> None:
        jlog = await connect(nats_url, root=log_root)
        try:
            seqr = jlog.sequencer("forger")
            await seqr.resume()
            now = time.time_ns() // 1_000_000  # no timer is due yet: decide() has nothing to say
            await seqr.append_inputs([InboxItem(inbox_seq=None, event=ev.Tick())], at_ms=now)
            wrong = ev.Placed(job=ev.JobRef(namespace="team-a", name="ghost", uid="g"), cluster="west", attempt=1)
            await seqr.append_decisions([wrong], at_ms=now)
        finally:
            await jlog.close()

    asyncio.run(append_wrong())
    try:
        code, out = kd(capsys, "replay", "--verify", "--nats", nats_url, "--root", log_root)
        assert code == 1
        assert "team-a/ghost" in out and "recomputed (0 decisions" in out
    finally:
        asyncio.run(delete_log(nats_url, log_root))


def test_replay_under_another_profile_compares_outcomes(
    recorded: tuple[str, str, Scenario], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url, root, _ = recorded
    profile = tmp_path / "all.yaml"
    profile.write_text(
        "name: everywhere\nfilters: [ClusterHealth, ClusterSelector, ClusterFeasibility]\n"
        "strategy: {type: AllAtOnce}\n"
    )
    code, out = kd(capsys, "replay", "--profile", str(profile), "--json", "--nats", url, "--root", root)
    assert code == 0, out
    doc = json.loads(out)
    assert doc["model_error"]["recorded"]["jobs"] == doc["baseline"]["jobs"] == doc["whatif"]["jobs"] == 4
    # TopK-1 made one copy per job; AllAtOnce copies every job to every cluster it fits.
    assert doc["model_error"]["recorded"]["remote_copies_per_job"] == 1.0
    assert doc["baseline"]["remote_copies_per_job"] == 1.0
    assert doc["whatif"]["remote_copies_per_job"] > 1.0
    assert doc["policy_effect"]["figures"]["remote_copies_per_job"] > 0
    code, out = kd(capsys, "replay", "--profile", str(profile), "--nats", url, "--root", root)
    assert code == 0 and "remote_copies_per_job" in out


@pytest.mark.parametrize(
    ("document", "path"),
    [
        ("name: inc\nstrategy: {type: Incremental, stepSize: 2}\n", "$.strategy"),  # one profile
        ("profiles:\n  - name: inc\n    strategy: {type: Incremental, stepSize: 2}\n", "$.profiles[0].strategy"),
        (
            "policy:\n  profiles:\n    - name: inc\n      strategy: {type: Incremental, stepSize: 2}\n",
            "$.policy.profiles[0].strategy",
        ),
    ],
)
def test_replay_profile_refuses_unknown_fields_as_start_up_does(
    nats_url: str, log_root: str, tmp_path: Path, document: str, path: str
) -> None:
    profile = tmp_path / "inc.yaml"
    profile.write_text(document)
    proc = subprocess.run(
        [sys.executable, "-m", "reconciler", "replay", "--profile", str(profile), "--nats", nats_url, "--root", log_root],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    # The same message serve gives for that field at start-up: where, what, and the right name.
    message = f"{path}: Object contains unknown field `stepSize` (the field is `step_size`)"
    where = re.search(rf"{re.escape(str(profile))}:(\d+): {re.escape(message)}", proc.stderr)
    assert where, proc.stderr
    assert "strategy:" in document.splitlines()[int(where.group(1)) - 1]


def test_log_follow_prints_new_entries(recorded: tuple[str, str, Scenario], tmp_path: Path) -> None:
    url, root, scenario = recorded
    proc = subprocess.Popen(
        [sys.executable, "-m", "reconciler", "log", "--follow", "--json", "--nats", url, "--root", root],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        seqs = [codec.decode_entry(proc.stdout.readline().encode()).seq for _ in range(scenario.last_seq)]
        assert seqs[-1] == scenario.last_seq

        async def append_tick() -> None:
            jlog = await connect(url, root=root)
            try:
                seqr = jlog.sequencer("tick")
                await seqr.resume()
                now = time.time_ns() // 1_000_000
                await seqr.append_inputs([InboxItem(inbox_seq=None, event=ev.Tick())], at_ms=now)
            finally:
                await jlog.close()

        asyncio.run(append_tick())
        entry = codec.decode_entry(proc.stdout.readline().encode())
        assert entry.seq == scenario.last_seq + 1 and isinstance(entry.event, ev.Tick)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def _preemption_log(url: str, root: str) -> None:
    """One 4-GPU cluster; a low-priority job runs there; a high-priority one needs it all."""
    jlog = await connect(url, root=root)
    loop = LeaderLoop(jlog, LoopSettings(leader_id="A", policy=POLICY, idle_wait_s=0.02))
    stop = asyncio.Event()
    term = asyncio.create_task(loop.run_term(stop=stop))
    try:
        await wait_ready(loop, timeout_s=20)
        await jlog.inbox.publish(ev.ClusterRegistered(cluster="solo", capacity={"cpu": 64_000, GPU: 4}), msg_id="r")
        await jlog.inbox.publish(ev.ClusterHeartbeat(cluster="solo"), msg_id="h")
        gang = [ev.PodSet(name="main", count=1, requests={GPU: 4})]
        low = ev.JobSubmitted(job=ev.JobRef(namespace="team-a", name="low", uid="ul"), pod_sets=gang, priority=10)
        await jlog.inbox.publish(low, msg_id="low")
        entries = await wait_for(jlog, lambda es: bool(decisions_of(es, ev.Nominated)))
        nominated = decisions_of(entries, ev.Nominated)[0].event
        assert isinstance(nominated, ev.Nominated)
        await admit(jlog, nominated, cluster="solo")
        await wait_for(jlog, lambda es: bool(decisions_of(es, ev.Placed)))
        high = ev.JobSubmitted(job=ev.JobRef(namespace="team-a", name="high", uid="uh"), pod_sets=gang, priority=100)
        await jlog.inbox.publish(high, msg_id="high")
        await wait_for(jlog, lambda es: bool(decisions_of(es, ev.Evict)))
        huge = [ev.PodSet(name="main", count=16, requests={GPU: 4})]  # fits no cluster at all
        await jlog.inbox.publish(
            ev.JobSubmitted(job=ev.JobRef(namespace="team-a", name="huge", uid="uz"), pod_sets=huge), msg_id="huge"
        )
        await wait_for(jlog, lambda es: bool(decisions_of(es, ev.Unschedulable)))
    finally:
        stop.set()
        await term
        await jlog.close()


def test_explain_shows_who_preempted_whom_and_why_a_job_waits(nats_url: str, log_root: str, capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(_preemption_log(nats_url, log_root))
    try:
        code, out = kd(capsys, "explain", "team-a/high", "--nats", nats_url, "--root", log_root)
        assert code == 0
        assert "-> team-a/high preempts team-a/low on solo" in out
        assert "ClusterHeadroom" in out  # why it had to preempt: no free GPUs anywhere
        code, out = kd(capsys, "explain", "team-a/low", "--nats", nats_url, "--root", log_root)
        assert code == 0
        assert "-> team-a/low is preempted by team-a/high on solo" in out
        assert "-> evicted from solo for team-a/high" in out
        # A job still waiting: why, as of the end of the log.
        code, out = kd(capsys, "explain", "team-a/huge", "--nats", nats_url, "--root", log_root)
        assert code == 0 and "now (Unschedulable), at the end of the log:" in out
        assert "solo     --  ClusterFeasibility: insufficient nvidia.com/gpu" in out.split("now (")[1]
        assert kd(capsys, "replay", "--verify", "--nats", nats_url, "--root", log_root)[0] == 0
    finally:
        asyncio.run(delete_log(nats_url, log_root))


def test_until_time_and_log_from_a_file(
    recorded: tuple[str, str, Scenario], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url, root, scenario = recorded
    _, out = kd(capsys, "log", "--json", "--nats", url, "--root", root)
    export = tmp_path / "log.jsonl"
    export.write_text(out)
    entries = [codec.decode_entry(ln.encode()) for ln in out.splitlines()]
    # --until TIME: every entry sequenced at or before that instant, none after.
    cut = entries[len(entries) // 2].at_ms
    expected = max(e.seq for e in entries if e.at_ms <= cut)
    when = datetime.fromtimestamp(cut / 1000, tz=UTC).isoformat(timespec="milliseconds")
    code, out = kd(capsys, "replay", "--json", "--until", when, "--file", str(export))
    assert code == 0 and json.loads(out)["seq"] == expected
    # The export reads like the live log.
    _, live = kd(capsys, "log", "--nats", url, "--root", root)
    code, from_file = kd(capsys, "log", "--file", str(export))
    assert code == 0 and from_file == live and len(live.splitlines()) == len(entries) >= scenario.last_seq


def test_verify_detects_decisions_missing_from_the_log(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # A leader sequenced a submission and a cluster but recorded no decision before its next
    # input batch: today's decide() nominates the job there, so something is missing.
    t0 = 1_795_000_000_000
    inputs = [
        POLICY,
        ev.ClusterRegistered(cluster="east", capacity={GPU: 8}),
        ev.ClusterHeartbeat(cluster="east"),
        ev.JobSubmitted(job=ev.JobRef(namespace="team-a", name="lost", uid="ul"), pod_sets=[]),
    ]
    entries = [ev.LogEntry(seq=i + 1, at_ms=t0, event=e, leader="L") for i, e in enumerate(inputs)]
    entries.append(ev.LogEntry(seq=5, at_ms=t0 + 1_000, event=ev.ClusterHeartbeat(cluster="east"), leader="L"))
    export = tmp_path / "log.jsonl"
    export.write_text("".join(codec.encode(e).decode() + "\n" for e in entries))
    code, out = kd(capsys, "replay", "--verify", "--file", str(export))
    assert code == 1
    assert "records no decisions after the input batch ending at seq 4" in out
    assert "Nominated" in out.split("recomputed")[1] and "team-a/lost" in out
    # The same log with the leader changing there is fine: the old leader may have died first.
    entries[-1] = msgspec.structs.replace(entries[-1], leader="M")
    export.write_text("".join(codec.encode(e).decode() + "\n" for e in entries))
    assert kd(capsys, "replay", "--verify", "--file", str(export))[0] == 0
