"""A log recorded by the demo before the architecture change must still replay to the same decisions.

The fixture was written by ``kdispatch demo`` at commit 4e2c1d6 (200 jobs, one cluster lost,
30 preemptions) and exported with ``kdispatch log --json``. Any change to the core that alters a
decision on it is a behaviour change and shows up here as a mismatch.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FIXTURE = Path(__file__).parent / "fixtures" / "demo-4e2c1d6.jsonl.gz"


def test_demo_log_from_before_the_redesign_verifies() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "reconciler.cli", "replay", "--verify", "--file", str(FIXTURE)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "651 decision batches recomputed, all identical" in proc.stdout, proc.stdout
    assert "jobs: 200  Finished 200" in proc.stdout
