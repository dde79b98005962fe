"""The one progress display: a rich bar on a terminal, plain lines elsewhere, nothing on stdout.

(The plain lines of replay and the structured-log events of serve: test_helpers.py.)"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.edge.progress import Progress

TIRESIAS = Path(__file__).resolve().parents[3] / "data" / "traces" / "tiresias-sample" / "60_job.csv"  # the repository's copy
ERASE_LINE_ABOVE = "\x1b[1A\x1b[2K"  # what rich writes to take a transient bar away


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_terminal_gets_a_bar_that_goes_away_when_done() -> None:
    term = Terminal()
    with Progress(total=200, label="explain", threshold=100, stream=term) as bar:
        for done in range(0, 201, 20):
            bar.update(done)
        bar.close("all read")
    out = term.getvalue()
    assert "━" in out and "200/200" in out and "entries" in out
    assert "explain: 100%" not in out  # no plain lines on a terminal
    # The bar is erased, then the closing message stays.
    assert out.endswith(ERASE_LINE_ABOVE + "explain: all read\n")


def test_paused_takes_the_bar_off_the_terminal_and_draws_it_again_below() -> None:
    term = Terminal()
    bar = Progress(total=10, label="demo", unit="jobs submitted", threshold=0, stream=term)
    bar.update(4, status="placed 3")
    with bar.paused():
        term.write("[   1.0s] a story line\n")
    bar.update(5)
    bar.close()
    before, after = term.getvalue().split("[   1.0s] a story line\n")
    assert before.endswith(ERASE_LINE_ABOVE)
    assert "4/10" in after and "placed 3" in after  # drawn again, status kept


def test_a_long_status_is_cut_not_wrapped_and_the_counts_stay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    term = Terminal()
    bar = Progress(total=40, label="demo", unit="jobs submitted", threshold=0, stream=term)
    bar.update(40, status="placed 12  " * 30)
    bar.close()
    drawn = [re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", part).rstrip("\n") for part in term.getvalue().split("\r")]
    last = [line for line in drawn if "40/40" in line][-1]
    assert len(last) <= 100 and last.endswith("…") and "jobs submitted" in last


def test_without_a_terminal_a_line_per_tenth_and_a_heartbeat_while_stuck() -> None:
    out, clock = io.StringIO(), Clock()
    bar = Progress(
        total=4, label="demo", unit="jobs submitted", threshold=0, stream=out, heartbeat_s=5.0, clock=clock
    )
    bar.update(4, status="placed 1")  # all submitted: the tenths are over
    for t, status in ((1.0, "placed 2"), (6.0, "placed 3"), (7.0, "placed 4"), (30.0, "placed 4")):
        clock.now = t
        bar.update(4, status=status)
    bar.close()
    assert out.getvalue().splitlines() == [
        "demo: 100% (4/4 jobs submitted)  placed 1",
        "demo: 100% (4/4 jobs submitted)  placed 3",  # 5 s later and changed; "placed 4" only 1 s later
    ]


@pytest.mark.parametrize("tty", [True, False])
def test_quiet_shows_nothing(tty: bool) -> None:
    stream = Terminal() if tty else io.StringIO()
    bar = Progress(total=100, threshold=0, stream=stream, enabled=False)
    bar.update(50)
    with bar.paused():
        pass
    bar.close("done")
    assert stream.getvalue() == ""


def _stderr_on_a_terminal(argv: list[str]) -> tuple[str, str]:
    """Run with stderr on a pseudo-terminal and stdout on a pipe: (stdout, what the terminal got)."""
    primary, secondary = os.openpty()
    env = {**os.environ, "COLUMNS": "120"}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=secondary, env=env)
    os.close(secondary)
    chunks = []
    while True:
        try:
            data = os.read(primary, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(primary)
    assert proc.stdout is not None
    stdout = proc.stdout.read().decode()
    assert proc.wait(timeout=120) == 0
    return stdout, b"".join(chunks).decode(errors="replace")


def test_simulate_draws_a_bar_on_a_terminal_and_prints_the_same_stdout() -> None:
    argv = [sys.executable, "-m", "reconciler", "simulate", "--trace", str(TIRESIAS), "--limit", "20"]
    stdout, terminal = _stderr_on_a_terminal(argv)
    plain = subprocess.run([*argv, "--quiet"], capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0 and plain.stderr == ""
    assert stdout == plain.stdout and "copies/job" in stdout
    assert "━" in terminal and "20/20" in terminal and "jobs submitted" in terminal
    assert "topk-1: 50%" not in terminal  # the bar, not the lines for logs
    assert "topk-2: " in terminal and "log entries in" in terminal  # each profile's closing line stays
