"""What a new user meets, through the real entry point (a ``kdispatch`` subprocess): one test per
class of surprise (issue 17). A reading verb never creates what it was asked to read; an
argument out of range is refused while parsing; a well-formed query that matches nothing says
so, with the nearest names; a stale lock is recovered; every hint names a command that exists."""

from __future__ import annotations

import asyncio
import gzip
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from eventlog.embedded import EmbeddedError, EmbeddedNats
from reconciler.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "fixtures" / "demo-4e2c1d6.jsonl.gz"
KDISPATCH = [sys.executable, "-m", "reconciler.cli"]


def kd(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([*KDISPATCH, *argv], capture_output=True, text=True, timeout=120, cwd=cwd, env=env)


@pytest.fixture(scope="module")
def small_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 300 entries of a recorded demo log: jobs demo/filler-000..."""
    path = tmp_path_factory.mktemp("log") / "small.jsonl"
    with gzip.open(FIXTURE, "rt") as f:
        path.write_text("".join(line for _, line in zip(range(300), f, strict=False)))
    return path


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# ---- 1. a verb that reads never creates ----------------------------------------------------------

READING = [["log"], ["replay"], ["replay", "--verify"], ["explain", "demo/filler-000"]]


@pytest.mark.parametrize("verb", READING, ids=" ".join)
def test_a_data_dir_that_does_not_exist_is_an_error_and_is_not_created(verb: list[str], tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    proc = kd(*verb, "--data-dir", str(missing))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"--data-dir {missing}: no such directory" in proc.stderr
    assert proc.stdout == ""
    assert not missing.exists()


@pytest.mark.parametrize("verb", READING, ids=" ".join)
def test_a_dir_without_a_log_store_is_an_error_and_gets_none(verb: list[str], tmp_path: Path) -> None:
    proc = kd(*verb, "--data-dir", str(tmp_path))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"--data-dir {tmp_path}: no log store in it" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_the_default_data_dir_is_not_created_either(tmp_path: Path) -> None:
    proc = kd("replay", "--verify", cwd=tmp_path)
    assert proc.returncode == 2 and "--data-dir .kdispatch: no such directory" in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("verb", READING, ids=" ".join)
def test_a_file_that_does_not_exist_is_named(verb: list[str], tmp_path: Path) -> None:
    proc = kd(*verb, "--file", str(tmp_path / "gone.jsonl"))
    assert proc.returncode == 2
    assert f"--file {tmp_path / 'gone.jsonl'}: no such file" in proc.stderr
    assert "`kdispatch log --json > FILE`" in proc.stderr


@pytest.mark.parametrize(
    ("verb", "message"),
    [
        (["replay", "--verify"], "kdispatch replay: nothing to verify: file {f} has no log entries"),
        (["replay"], "kdispatch replay: nothing to replay: file {f} has no log entries"),
        (["log"], "kdispatch log: file {f} has no log entries"),
        (["explain", "a/b"], "kdispatch explain: file {f} has no log entries"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else "",
)
def test_an_empty_log_does_not_pass(verb: list[str], message: str, tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    proc = kd(*verb, "--file", str(empty))
    assert proc.returncode == 1
    assert message.format(f=empty) in proc.stderr
    assert "passed" not in proc.stdout and "identical" not in proc.stdout


def test_an_unknown_root_on_a_server_is_an_error_and_no_stream_is_made(nats_url: str, log_root: str) -> None:
    proc = kd("replay", "--verify", "--nats", nats_url, "--root", log_root)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{nats_url}: no log with root {log_root!r} (no stream {log_root.upper()}_LOG)" in proc.stderr

    async def streams() -> list[str]:
        import nats

        nc = await nats.connect(nats_url)
        try:
            return [s.config.name for s in await nc.jetstream().streams_info()]
        finally:
            await nc.close()

    assert not [s for s in asyncio.run(streams()) if s.startswith(log_root.upper())]


# ---- 2. arguments out of range: refused while parsing -------------------------------------------

BAD_ARGUMENTS = [
    (["log", "-n", "-5"], "argument -n/--lines: -5 is too small (give an integer >= 1)"),
    (["log", "-n", "0"], "argument -n/--lines: 0 is too small"),
    (["log", "-n", "x"], "argument -n/--lines: 'x' is not a whole number"),
    (["log", "--from-seq", "0"], "argument --from-seq: 0 is too small"),
    (["log", "--job", "nojob"], "argument --job: 'nojob': give the job as NAMESPACE/NAME"),
    (["log", "--subject", "kd.log..x"], "empty token at position 3"),
    (["log", "--subject", "kd.log.>.x"], "'>' matches the rest of a subject, so it must come last"),
    (["log", "--subject", "kd.log.decision .>"], "a subject filter has no spaces"),
    (["log", "--subject", "kd.log.job*.>"], "'*' and '>' are whole tokens"),
    (["log", "--subject", "kd.log.decison.>"], "no category 'decison'; categories are cluster, decision, job"),
    (["log", "--subject", "kd.log.decison.>"], "(did you mean: decision?)"),
    (["log", "--subject", "kd.log.decision.place"], "no event type 'place' in category 'decision'"),
    (["log", "--subject", "kd.log.decision.place"], "(did you mean: placed?)"),
    (["log", "--subject", "kd.log.*.lots"], "no event type 'lots' in any category; types are"),
    (["log", "--subject", "kd.in.job.>"], "the second token is 'log'"),
    (["log", "--subject", "kd.log.job.submitted.ns.name.extra"], "log subjects have at most 6 tokens"),
    (["explain", "team-a"], "argument NS/NAME: 'team-a': give the job as NAMESPACE/NAME"),
    (["explain", "a/b/c"], "give the job as NAMESPACE/NAME"),
    (["replay", "--until", "0"], "argument --until: 0: log sequences start at 1"),
    (["replay", "--until", "yesterday"], "give a log sequence (e.g. 1234) or a time"),
    (["simulate", "--trace", "t.csv", "--limit", "0"], "argument --limit: 0 is too small"),
    (["simulate", "--trace", "t.csv", "--capacity-scale", "0"], "argument --capacity-scale: 0 is out of range"),
    (["simulate", "--trace", "t.csv", "--time-scale", "-1"], "argument --time-scale: -1 is out of range"),
    (["simulate", "--trace", "t.csv", "--time-scale", "nan"], "argument --time-scale: nan is out of range"),
    (["serve", "--lease-ttl", "0"], "argument --lease-ttl: 0 is out of range"),
    (["serve", "--snapshot-every", "0"], "argument --snapshot-every: 0 is too small"),
    (["serve", "--webhook-port", "70000"], "argument --webhook-port: 70000 is not a port number (1-65535)"),
    (["serve", "--metrics-port", "-1"], "argument --metrics-port: -1 is not a port number (0-65535, 0: any free port)"),
    (["demo", "--jobs", "3"], "argument --jobs: 3 is too small (give an integer >= 16)"),
    (["demo", "--seed", "-1"], "argument --seed: -1 is too small"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_ARGUMENTS, ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_an_argument_out_of_range_is_refused_with_what_is_accepted(argv: list[str], message: str) -> None:
    proc = kd(*argv)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"kdispatch {argv[0]}: error: " in proc.stderr
    assert message in proc.stderr
    assert proc.stdout == ""


def test_simulate_lists_the_formats_the_readers_accept() -> None:
    from reconciler.commands.simulate import FORMATS as listed
    from reconciler.simulate.readers import FORMATS

    assert listed == FORMATS


# ---- 2b. a well-formed query that matches nothing says so, with the nearest names ----------------


def test_log_of_an_unknown_job_exits_1_with_the_nearest_names(small_log: Path) -> None:
    proc = kd("log", "--file", str(small_log), "--job", "demo/filer-003")
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert f"kdispatch log: no job demo/filer-003 in 300 entries read from file {small_log}" in proc.stderr
    assert "(did you mean: demo/filler-003" in proc.stderr


def test_explain_of_an_unknown_job_exits_1_with_the_nearest_names(small_log: Path) -> None:
    proc = kd("explain", "demo/filer-001", "--file", str(small_log))
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert f"kdispatch explain: no job demo/filer-001 in file {small_log}" in proc.stderr
    assert "did you mean: demo/filler-001" in proc.stderr


def test_a_subject_filter_that_matches_nothing_names_the_token_and_the_nearest(small_log: Path) -> None:
    proc = kd("log", "--file", str(small_log), "--subject", "kd.log.*.*.dem.*")
    assert proc.returncode == 1
    assert "nothing matches --subject kd.log.*.*.dem.* in 300 entries" in proc.stderr
    assert "no subject has 'dem' (did you mean: demo?)" in proc.stderr


def test_from_seq_past_the_end_says_where_the_log_ends(small_log: Path) -> None:
    proc = kd("log", "--file", str(small_log), "--from-seq", "301")
    assert proc.returncode == 1 and "--from-seq 301: the log ends at seq 300" in proc.stderr


def test_a_query_that_matches_still_prints_and_exits_0(small_log: Path) -> None:
    proc = kd("log", "--file", str(small_log), "--job", "demo/filler-000", "--subject", "kd.log.job.>")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout and all("demo/filler-000" in line for line in proc.stdout.splitlines())


# ---- 4. a stale nats-server.lock -----------------------------------------------------------------


def _store_with_a_stale_lock(data_dir: Path) -> int:
    """A data dir with a log store whose last owner was killed (its lock file still names it)."""
    proc = kd("replay", "--data-dir", str(data_dir))  # refused: nothing there yet
    assert proc.returncode == 2
    with EmbeddedNats(data_dir=data_dir):
        pass
    from eventlog.jetstream import connect

    async def make_log() -> None:
        jlog = await connect(None, data_dir=data_dir)
        await jlog.close()

    asyncio.run(make_log())
    pid = dead_pid()
    (data_dir / "nats-server.lock").write_text(f"nats-server pid {pid} of pid {pid} at nats://127.0.0.1:1\n")
    return pid


def test_a_lock_left_by_a_dead_owner_is_recovered_with_a_note(tmp_path: Path) -> None:
    pid = _store_with_a_stale_lock(tmp_path)
    proc = kd("replay", "--verify", "--data-dir", str(tmp_path))
    # The log opened (and is empty: nothing to verify), and the user is told about the lock.
    assert f"kdispatch: recovered a stale lock on {tmp_path}: its owner (pid {pid}) is gone" in proc.stderr
    assert "nothing to verify" in proc.stderr and proc.returncode == 1
    # A clean stop leaves an empty lock: the next run has nothing to recover.
    assert (tmp_path / "nats-server.lock").read_text() == ""
    again = kd("replay", "--verify", "--data-dir", str(tmp_path))
    assert "recovered" not in again.stderr


def test_a_server_left_running_by_a_killed_owner_is_named_with_how_to_stop_it(tmp_path: Path) -> None:
    orphan_of = EmbeddedNats(data_dir=tmp_path)
    tmp_path.mkdir(exist_ok=True)
    orphan = subprocess.Popen(orphan_of._argv(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        owner = dead_pid()
        (tmp_path / "nats-server.lock").write_text(
            f"nats-server pid {orphan.pid} of pid {owner} at {orphan_of.url}\n"
        )
        with pytest.raises(EmbeddedError) as err:
            EmbeddedNats(data_dir=tmp_path).start()
        assert f"a nats-server left by a killed run (pid {orphan.pid}, owner pid {owner} is gone)" in str(err.value)
        assert f"stop it with `kill {orphan.pid}`, or read it with --nats {orphan_of.url}" in str(err.value)
    finally:
        orphan.terminate()
        orphan.wait()


# ---- every hint names a command that exists ------------------------------------------------------

_HINT = re.compile(r"`kdispatch ([a-z][\w-]*)((?: [a-z][\w-]*)?)")


def _hints() -> set[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for package in ("eventlog", "reconciler", "webhook"):
        for path in (ROOT / package).rglob("*.py"):
            for m in _HINT.finditer(path.read_text()):
                found.add((m.group(1), m.group(2).strip()))
    return found


def test_every_kdispatch_command_in_a_hint_exists() -> None:
    hints = _hints()
    assert ("log", "") in hints  # the pattern finds what it is meant to
    for verb, word in sorted(hints):
        assert verb in COMMANDS, f"a hint names `kdispatch {verb}`, which is not a command"
        # `kdispatch log export`: a bare word after the verb would be a subcommand; there are none.
        assert not word, f"a hint names `kdispatch {verb} {word}`; {verb} has no subcommand {word!r}"
    for verb in sorted({v for v, _ in hints}):
        proc = kd(verb, "--help")
        assert proc.returncode == 0 and proc.stdout.startswith(f"usage: kdispatch {verb}"), proc.stderr
