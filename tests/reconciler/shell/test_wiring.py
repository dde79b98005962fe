"""The composition root through ``serve``: a bad cluster entry stops start-up before anything runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_a_bad_cluster_entry_stops_serve_before_anything_runs(
    tmp_path: Path, nats_url: str, log_root: str
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("clusters:\n  - name: east\n    simulated: {capacity: {cpu: lots}}\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "reconciler",
            "serve",
            "--config",
            str(config),
            "--nats",
            nats_url,
            "--root",
            log_root,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ},
    )
    assert proc.returncode == 2, proc.stderr
    # The config is decoded once, at the edge: the bad quantity is caught there, with its line.
    assert "invalid config" in proc.stderr and "config.yaml:3" in proc.stderr
    assert "$.clusters[0].simulated.capacity" in proc.stderr and "'lots'" in proc.stderr
    assert '"serving"' not in proc.stderr  # nothing started: no leader, no actuator
