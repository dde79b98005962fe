"""Files handed to the CLI, damaged the ways files get damaged: every error names the file, the
line (and the path in it) and what was expected; a JSONL export cut short still replays.

Each test runs the real entry point (``reconciler.cli:main``) and reads what a user reads: the
exit code, stdout and stderr.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
import structlog

from reconciler.cli import main

FIXTURE = Path(__file__).parents[2] / "fixtures" / "demo-4e2c1d6.jsonl.gz"
LINES = 400  # enough for many decision batches, quick to verify


def kd(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    finally:
        structlog.reset_defaults()  # the command configured logging for itself, not for other tests
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def lines() -> list[bytes]:
    """The first ``LINES`` entries of a real log (the demo's), one JSON entry per line."""
    with gzip.open(FIXTURE, "rb") as f:
        return [next(f).rstrip(b"\n") for _ in range(LINES)]


def write(path: Path, lines: list[bytes], *, end: bytes = b"\n") -> Path:
    path.write_bytes(b"\n".join(lines) + end)
    return path


# --- JSONL exports (--file) ---------------------------------------------------------------------


def test_an_export_cut_short_replays_all_before_the_cut_and_says_what_was_dropped(
    tmp_path: Path, lines: list[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    cut = lines[-1][:57]
    path = write(tmp_path / "cut.jsonl", [*lines[:-1], cut], end=b"")
    code, out, err = kd(capsys, "replay", "--file", str(path), "--quiet")
    assert code == 0, err
    assert f"replayed {LINES - 1} entries up to seq {LINES - 1}" in out
    assert f"{path}: dropped line {LINES} (57 bytes): the file ends mid-entry: probably a copy cut short" in err
    code, out, err = kd(capsys, "replay", "--verify", "--file", str(path), "--quiet")
    assert code == 0, out + err
    assert "all identical" in out
    code, out, err = kd(capsys, "explain", "team-a/none", "--file", str(path), "--quiet")
    assert "the file ends mid-entry" in err and "no job team-a/none in" in err


def test_a_gzip_export_cut_short_reads_what_it_holds(
    tmp_path: Path, lines: list[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    whole = gzip.compress(b"\n".join(lines) + b"\n")
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(whole[: len(whole) // 2])
    code, out, err = kd(capsys, "replay", "--file", str(path), "--quiet")
    assert code == 0, err
    assert "replayed " in out
    assert f"{path}: the compressed file ends early: probably a copy cut short" in err


def test_a_damaged_line_in_the_middle_is_an_error_naming_file_line_and_field(
    tmp_path: Path, lines: list[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    lines[199] = lines[199].replace(b'"at_ms":', b'"at_ms":"soon","x":', 1)
    path = write(tmp_path / "bad.jsonl", lines)
    code, _, err = kd(capsys, "replay", "--file", str(path), "--quiet")
    assert code == 1
    assert err.startswith(f"kdispatch replay: {path}:200: $.at_ms: Expected `int`, got `str`"), err
    assert "each line of a log export is one JSON log entry" in err


def test_a_line_that_is_not_utf8_is_an_error_naming_file_and_line(
    tmp_path: Path, lines: list[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    lines[9] = lines[9].replace(b'"leader":"', b'"leader":"caf\xe9', 1)
    path = write(tmp_path / "latin.jsonl", lines)
    code, _, err = kd(capsys, "log", "--file", str(path))
    assert code == 1
    assert f"kdispatch log: {path}:10: not UTF-8 text" in err


@pytest.mark.parametrize("content", [b"", b"\n\n  \n"])
def test_an_empty_export_is_an_error_saying_what_it_should_hold(
    tmp_path: Path, content: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(content)
    code, _, err = kd(capsys, "replay", "--file", str(path), "--quiet")
    assert code == 1
    assert str(path) in err and "has no log entries" in err  # found before any entry is decoded


def test_missing_lines_fail_verify_as_a_gap_not_a_mismatch(
    tmp_path: Path, lines: list[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "gap.jsonl", lines[:200] + lines[203:])
    code, out, err = kd(capsys, "replay", "--verify", "--file", str(path), "--quiet")
    assert code == 1
    assert f"verify: NOT VERIFIED: entries 201\u2013203 are missing from {path}: the export is incomplete" in out
    assert "MISMATCH" not in out
    assert "entries 201\u2013203 are missing" in err  # the reader's warning, as for any verb


def test_missing_lines_are_a_warning_for_log_explain_and_a_plain_replay(
    tmp_path: Path, lines: list[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "gap.jsonl", lines[:200] + lines[201:])
    warning = f"entry 201 is missing from {path}: the export is incomplete"
    code, out, err = kd(capsys, "log", "--file", str(path))
    assert code == 0 and len(out.splitlines()) == LINES - 1
    assert err.count(warning) == 1
    code, out, err = kd(capsys, "replay", "--file", str(path), "--quiet")
    assert code == 0 and warning in err
    code, out, err = kd(capsys, "explain", "team-a/none", "--file", str(path), "--quiet")
    assert warning in err


# --- YAML files: --profile, --config, --clusters --------------------------------------------------

PROFILE = "a profile (name:, filters:, scores:, strategy:, ...)"


@pytest.fixture
def log_file(tmp_path: Path, lines: list[bytes]) -> str:
    return str(write(tmp_path / "log.jsonl", lines))


def test_a_profile_not_in_utf8_names_the_line_and_column(
    tmp_path: Path, log_file: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "p.yaml"
    path.write_bytes("name: café\nfilters: []\n".encode("latin-1"))
    trace = tmp_path / "t.csv"
    trace.write_text("job,submit_s,runtime_s\na,1,2\n")
    for argv in (
        ["replay", "--file", log_file, "--profile", str(path)],
        ["simulate", "--trace", str(trace), "--profile", str(path), "--quiet"],
    ):
        code, _, err = kd(capsys, *argv)
        assert code == 2
        assert f"{path}:1:10: not UTF-8 text: byte 0xe9" in err and "save the file as UTF-8" in err, err


@pytest.mark.parametrize(
    ("content", "said"),
    [(b"", "the file is empty"), (b"# a comment\n\n---\n", "the file holds only comments or nothing")],
)
def test_an_empty_profile_is_an_error_saying_what_it_should_hold(
    tmp_path: Path, log_file: str, content: bytes, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "p.yaml"
    path.write_bytes(content)
    code, _, err = kd(capsys, "replay", "--file", log_file, "--profile", str(path))
    assert code == 2
    assert f"invalid --profile: {path}: {said}; expected {PROFILE}" in err


def test_a_yaml_syntax_error_names_line_and_column(
    tmp_path: Path, log_file: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("name: a\nfilters: [x,\n  y: 1: 2\n")
    code, _, err = kd(capsys, "replay", "--file", log_file, "--profile", str(path))
    assert code == 2
    assert f"{path}:3:7: invalid YAML: expected ',' or ']', but got ':'" in err
    assert "flow sequence that starts at line 2 column 10" in err


def test_a_control_character_in_yaml_names_line_and_column(
    tmp_path: Path, log_file: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text('name: a\nfilters: ["x\x07"]\n')
    code, _, err = kd(capsys, "replay", "--file", log_file, "--profile", str(path))
    assert code == 2
    assert f"{path}:2:13: invalid YAML: the control character U+0007 is not allowed here" in err


def test_a_profile_that_is_not_a_mapping_says_what_it_should_be(
    tmp_path: Path, log_file: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("- topk\n- all\n")
    code, _, err = kd(capsys, "replay", "--file", log_file, "--profile", str(path))
    assert code == 2
    assert f"{path}:1: $: expected {PROFILE}" in err and "found a list" in err


@pytest.mark.parametrize(
    ("content", "said"),
    [(b"", ": the file is empty; expected a kdispatch config file"), (b"nats:\n  url: \xff\n", ":2:8: not UTF-8 text")],
)
def test_a_bad_config_file_is_named_with_its_line(
    tmp_path: Path, content: bytes, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(content)
    code, _, err = kd(capsys, "log", "--config", str(path))
    assert code == 1
    assert f"kdispatch log: {path}{said}" in err


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"", ": the file is empty; expected a list of clusters"),
        (b"- name: a\n  simulated: {capacity: {cpu: 1}\n", ":3:1: invalid YAML"),
        (b"- name: \xe9\n", ":1:9: not UTF-8 text"),
    ],
)
def test_a_bad_clusters_file_is_named_with_its_line(
    tmp_path: Path, content: bytes, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job,submit_s,runtime_s\na,1,2\n")
    path = tmp_path / "clusters.yaml"
    path.write_bytes(content)
    code, _, err = kd(capsys, "simulate", "--trace", str(trace), "--clusters", str(path), "--quiet")
    assert code == 2
    assert f"kdispatch simulate: {path}{said}" in err


# --- traces (--trace) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("csv", "a CSV trace with the columns job, submit_s, runtime_s"),
        ("tiresias", "a Tiresias job trace: CSV with the columns job_id, num_gpu, submit_time"),
        ("alibaba", "a pod list of the Alibaba trace: CSV with the columns name, cpu_milli"),
    ],
)
def test_an_empty_trace_says_what_its_format_should_hold(
    tmp_path: Path, fmt: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(b"")
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text("- name: a\n  simulated: {capacity: {cpu: 1}}\n")
    code, _, err = kd(capsys, "simulate", "--trace", str(path), "--format", fmt, "--clusters", str(clusters))
    assert code == 2
    assert f"kdispatch simulate: {path}: the file is empty; expected {expected}" in err


@pytest.mark.parametrize("fmt", ["csv", "tiresias"])
def test_a_trace_not_in_utf8_names_line_and_column(
    tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "trace.csv"
    header = b"job,submit_s,runtime_s\n" if fmt == "csv" else b"job_id,num_gpu,submit_time,duration\n"
    path.write_bytes(header + b"1,1,1,1\n\xe9,1,1,1\n")
    code, _, err = kd(capsys, "simulate", "--trace", str(path), "--format", fmt)
    assert code == 2
    assert f"kdispatch simulate: {path}:3:1: not UTF-8 text: byte 0xe9" in err


def test_trace_lines_count_blank_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "trace.csv"
    path.write_text("job,submit_s,runtime_s\n\na,1,2\n\nb,soon,2\n")
    code, _, err = kd(capsys, "simulate", "--trace", str(path))
    assert code == 2
    assert f"{path}:5: column 'submit_s': 'soon' is not a number" in err
