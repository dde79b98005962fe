"""``python -m webhook --queues PATH``: the queue configuration read with the reconciler's loader
(what the webhook does with it is tests/webhook's admission tests')."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from eventlog.kube.kueue import load_queues
from webhook.__main__ import build_parser, load_queues_or_exit, read_config

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "deploy" / "examples" / "three-teams.yaml"


def test_queues_from_the_option_or_the_config_file(tmp_path: Path) -> None:
    args = build_parser().parse_args(["--queues", str(EXAMPLE)])
    assert load_queues_or_exit(args.queues) == load_queues(EXAMPLE)
    assert load_queues_or_exit(build_parser().parse_args([]).queues) is None  # tenancy off
    config = tmp_path / "config.yaml"
    config.write_text(f"queues: {EXAMPLE}\n")
    assert read_config(str(config))["queues"] == str(EXAMPLE)


def test_an_invalid_queue_configuration_stops_the_webhook_before_it_listens(tmp_path: Path) -> None:
    bad = tmp_path / "queues.yaml"
    bad.write_text(EXAMPLE.read_text().replace("clusterQueue: product", "clusterQueue: prodcut"))
    with pytest.raises(
        SystemExit, match=r"LocalQueue/product/default: \$\.spec\.clusterQueue: no ClusterQueue named 'prodcut'"
    ):
        load_queues_or_exit(str(bad))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook",
            "--queues",
            str(bad),
            "--nats",
            "nats://127.0.0.1:1",
            "--data-dir",
            str(tmp_path / "data"),
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "invalid queue configuration" in proc.stderr and "did you mean 'product'" in proc.stderr
