"""``kdispatch demo --hold``: the page's URL is printed at the start, and after the run the final
state stays served (API and page) until Ctrl-C, which ends the demo with its own exit code."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

KDISPATCH = [sys.executable, "-m", "reconciler"]


def test_hold_serves_the_final_state_until_interrupted(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    proc = subprocess.Popen(
        [*KDISPATCH, "demo", "--fast", "--jobs", "16", "--data-dir", str(data_dir), "--quiet", "--hold"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:  # ends at "holding" or when the demo exits early
            lines.append(line)
            if line.startswith("holding the demo's final state"):
                break
        out = "".join(lines)
        assert "holding the demo's final state" in out, out + (proc.stderr.read() if proc.stderr else "")
        started = re.search(r"web page: (http://127\.0\.0\.1:\d+/)", out)
        held = re.search(r"final state: (http://127\.0\.0\.1:\d+/)", out)
        assert started and held and started.group(1) == held.group(1)
        url = held.group(1)
        with urllib.request.urlopen(url + "api/v1/queues", timeout=10) as resp:
            queues = json.loads(resp.read())
        [queue] = queues["items"]
        assert queue["finished"] >= 16 and queue["pending"] == queue["admitted"] == 0  # the state it ended on
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert b'<script src="app.js"' in resp.read()
        # While it holds, the read-only commands reach the log through the demo's server.
        status = subprocess.run(
            [*KDISPATCH, "status", "--data-dir", str(data_dir), "-o", "json"], capture_output=True, text=True, timeout=60
        )
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["seq"] == queues["seq"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
