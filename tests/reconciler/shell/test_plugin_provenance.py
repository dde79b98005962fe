"""Plugins outside the fold: the leader records which plugins (distribution, version) its policy
uses, and ``kdispatch replay --verify`` run where one is missing or another version says which
and what to install, instead of reporting a decision mismatch."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from eventlog import codec
from eventlog import events as ev
from eventlog.memory import MemoryLog
from reconciler import core
from reconciler.edge.plugins import PluginSet, builtin_set, check
from reconciler.history.replay import replay
from reconciler.service.loop import LeaderLoop, LoopSettings, wait_ready
from tests.reconciler import gpugen

from .scenario import decisions_of, wait_for

ROOT = Path(__file__).resolve().parents[3]
GPUGEN_01 = ev.PluginRef(name="GpuGeneration", distribution=gpugen.DISTRIBUTION, version="0.1")


def with_gpugen(version: str = "0.1") -> PluginSet:
    """What discovery gives where kd-gpugen ``version`` is installed (built without touching
    this process's installed packages)."""
    base = builtin_set()
    ref = msgspec.structs.replace(GPUGEN_01, version=version)
    return PluginSet(registry=base.registry.with_plugins([gpugen.GpuGeneration]), refs={**base.refs, "GpuGeneration": ref})


async def _term(mlog: MemoryLog, plugins: PluginSet) -> tuple[asyncio.Event, asyncio.Task[str]]:
    """A leader term under a policy using GpuGeneration, started and ready."""
    policy = ev.PolicyLoaded(profiles=[gpugen.PROFILE])
    loop = LeaderLoop(mlog, LoopSettings(leader_id="A", policy=policy, idle_wait_s=0.01, plugins=plugins))
    stop = asyncio.Event()
    term = asyncio.create_task(loop.run_term(stop=stop))
    await wait_ready(loop, timeout_s=20)
    return stop, term


async def _lead(plugins: PluginSet) -> list[ev.LogEntry]:
    """A leader term on a memory log: two clusters, one job, placed by GpuGeneration."""
    mlog = MemoryLog()
    stop, term = await _term(mlog, plugins)
    for name, gen in (("old", "3"), ("new", "5")):
        await mlog.inbox.publish(ev.ClusterRegistered(cluster=name, labels={"gpu-gen": gen}, capacity={"cpu": 64_000}))
        await mlog.inbox.publish(ev.ClusterHeartbeat(cluster=name))
    await mlog.inbox.publish(
        ev.JobSubmitted(
            job=ev.JobRef(namespace="team-a", name="train", uid="u1"),
            pod_sets=[ev.PodSet(name="main", count=1, requests={"cpu": 1000})],
        )
    )
    entries = await wait_for(mlog, lambda es: bool(decisions_of(es, ev.Nominated)))  # type: ignore[arg-type]
    stop.set()
    assert await term == "stopped"
    return entries


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[ev.LogEntry]]:
    entries = asyncio.run(_lead(with_gpugen("0.1")))
    path = tmp_path_factory.mktemp("log") / "gpugen.jsonl"
    path.write_text("".join(codec.encode(e).decode() + "\n" for e in entries))
    return path, entries


def test_the_leader_records_the_plugins_its_policy_uses(recorded: tuple[Path, list[ev.LogEntry]]) -> None:
    _, entries = recorded
    [policy] = [e.event for e in entries if isinstance(e.event, ev.PolicyLoaded)]
    assert isinstance(policy, ev.PolicyLoaded) and policy.plugins is not None
    refs = {r.name: r for r in policy.plugins}
    assert refs["GpuGeneration"] == GPUGEN_01
    assert sorted(refs) == sorted(core.plugins_used(policy))  # the plugins used, not all there are
    assert all(r.builtin and r.distribution == "kdispatch" for n, r in refs.items() if n != "GpuGeneration")
    [nominated] = [e.event for e in decisions_of(entries, ev.Nominated)]
    assert isinstance(nominated, ev.Nominated) and nominated.clusters == ["new"]  # the plugin did decide


async def test_a_leader_with_another_plugin_version_records_the_policy_again() -> None:
    mlog = MemoryLog()
    for version in ("0.1", "0.1", "0.2"):
        stop, term = await _term(mlog, with_gpugen(version))
        stop.set()
        assert await term == "stopped"
    policies = [e.event for e in mlog.entries if isinstance(e.event, ev.PolicyLoaded)]
    versions = [{r.name: r.version for r in p.plugins or []}["GpuGeneration"] for p in policies]
    assert versions == ["0.1", "0.2"]  # the same plugins again: nothing new to record


def _replay_verify(log: Path, tmp_path: Path, *, installed: str | None) -> subprocess.CompletedProcess[str]:
    """``kdispatch replay --verify --file LOG`` in a fresh process, with kd-gpugen ``installed``
    (that version on the path) or not."""
    path = [str(ROOT)]
    if installed is not None:
        path.insert(0, str(gpugen.install(tmp_path / "site", version=installed)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    return subprocess.run(
        [sys.executable, "-m", "reconciler.cli", "replay", "--verify", "--file", str(log)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_replay_verify_where_the_plugin_is_missing_names_it_and_what_to_install(
    recorded: tuple[Path, list[ev.LogEntry]], tmp_path: Path
) -> None:
    proc = _replay_verify(recorded[0], tmp_path, installed=None)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "MISMATCH" not in proc.stdout and "nothing was compared" in proc.stdout
    assert (
        "plugin GpuGeneration (used by profile default): the log was written with kd-gpugen 0.1; "
        "it is not installed here (policy in force at seq 1)"
    ) in proc.stdout
    assert "to verify this log: pip install 'kd-gpugen==0.1'" in proc.stdout


def test_replay_verify_where_the_plugin_is_another_version_says_both(
    recorded: tuple[Path, list[ev.LogEntry]], tmp_path: Path
) -> None:
    proc = _replay_verify(recorded[0], tmp_path, installed="0.2")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the log was written with kd-gpugen 0.1; here it is kd-gpugen 0.2" in proc.stdout
    assert "pip install 'kd-gpugen==0.1'" in proc.stdout


def test_replay_verify_with_the_recorded_version_installed_verifies(
    recorded: tuple[Path, list[ev.LogEntry]], tmp_path: Path
) -> None:
    proc = _replay_verify(recorded[0], tmp_path, installed="0.1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all identical" in proc.stdout and "warning" not in proc.stderr


def test_a_plain_replay_where_the_plugin_is_missing_warns_and_goes_on(
    recorded: tuple[Path, list[ev.LogEntry]], tmp_path: Path
) -> None:
    log = recorded[0]
    proc = subprocess.run(
        [sys.executable, "-m", "reconciler.cli", "replay", "--file", str(log)],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "kdispatch replay: warning: plugin GpuGeneration" in proc.stderr and "kd-gpugen==0.1" in proc.stderr
    assert "jobs: 1" in proc.stdout


def test_a_log_that_records_no_plugins_is_taken_to_use_built_in_ones_only() -> None:
    old = ev.PolicyLoaded(profiles=[core.DEFAULT_PROFILE])  # as logs were written before
    assert old.plugins is None and check(old, builtin_set()) == []
    [problem] = check(ev.PolicyLoaded(profiles=[gpugen.PROFILE]), with_gpugen())
    assert problem.name == "GpuGeneration" and problem.found == GPUGEN_01 and not problem.log_records_plugins
    assert "the log predates recording plugins, so it was written with a built-in one" in problem.describe()
    # Built-in plugins of another kdispatch version are what --verify itself compares.
    stamped = builtin_set().stamp(old)
    older = msgspec.structs.replace(
        stamped, plugins=[msgspec.structs.replace(r, version="0.0.1") for r in stamped.plugins or []]
    )
    assert check(older, builtin_set()) == []


def test_a_policy_entry_written_before_plugins_were_recorded_still_decodes() -> None:
    line = b'{"seq":1,"at_ms":5,"event":{"type":"PolicyLoaded","v":1,"profiles":[{"name":"default"}]},"leader":"L"}'
    entry = codec.decode_entry(line)
    assert isinstance(entry.event, ev.PolicyLoaded) and entry.event.plugins is None


def test_a_broken_entry_point_stops_a_command_at_start_up_naming_it(tmp_path: Path) -> None:
    site = gpugen.install(tmp_path, version="0.3", target="kd_gpugen_gone:GpuGeneration")
    proc = subprocess.run(
        [sys.executable, "-m", "reconciler.cli", "replay", "--file", str(tmp_path / "never-read.jsonl")],
        env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), str(ROOT)])),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "entry point GpuGeneration = kd_gpugen_gone:GpuGeneration of kd-gpugen 0.3" in proc.stderr
    assert "cannot be loaded: ModuleNotFoundError" in proc.stderr


async def test_a_replay_from_a_snapshot_checks_the_policy_in_force_there(
    recorded: tuple[Path, list[ev.LogEntry]],
) -> None:
    _, entries = recorded
    assert isinstance(entries[0].event, ev.PolicyLoaded)
    state = core.fold(core.new_state(plugins=with_gpugen().registry), entries[0])
    snapshot = core.load_state(core.dump_state(state))  # loaded where kd-gpugen is missing
    mlog = MemoryLog()
    mlog.entries.extend(entries)
    result = await replay(mlog.reader, state=snapshot, from_seq=2, verify=True, plugins=builtin_set())
    assert [(seq, p.name, p.found) for seq, p in result.plugin_problems] == [(1, "GpuGeneration", None)]
    assert result.entries == 0 and result.mismatch is None  # stopped before recomputing anything
