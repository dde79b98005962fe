"""Decoding the config file: units converted once, errors with file, line and JSON path."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.config import ConfigError, load_config

CONFIG = """\
policy:
  claimTtl: 90s
  requeueBackoff: 250
clusters:
  - name: a
    labels: {kdispatch.io/gpu: a100}
  - name: b
    workerLostTimeout: null
    simulated:
      capacity:
        cpu: 1500m
        nvidia.com/gpu: 4
        memory: 2Gi
      defaultRuntime: 1h30m
"""


def test_durations_and_quantities_are_integers_once_decoded(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    config = load_config(path)
    assert (config.policy.claim_ttl_ms, config.policy.requeue_backoff_ms) == (90_000, 250)
    assert config.policy.worker_lost_timeout_ms == 60_000  # the default, already an int
    b = config.clusters[1]
    assert b.worker_lost_timeout_ms is None and b.heartbeat_interval_ms == 5_000
    assert b.simulated is not None
    assert b.simulated.capacity == {"cpu": 1500, "nvidia.com/gpu": 4, "memory": 2 * 2**30}
    assert b.simulated.default_runtime_ms == 5_400_000


@pytest.mark.parametrize(
    ("edit", "line", "message"),
    [
        (("claimTtl: 90s", "claimTtl: 1.5"), 2, "$.policy.claimTtl: 1.5 is not a duration"),
        (("claimTtl: 90s", "claimTtl: -1"), 2, "$.policy.claimTtl: -1 is negative"),
        (("claimTtl: 90s", "claimTtl: [1]"), 2, "$.policy.claimTtl: [1] is not a duration"),
        (("nvidia.com/gpu: 4", "nvidia.com/gpu: four"), 10, "$.clusters[1].simulated.capacity: nvidia.com/gpu: 'four'"),
        (("memory: 2Gi", "memory: -2Gi"), 10, "$.clusters[1].simulated.capacity: memory: '-2Gi' is negative"),
        (("defaultRuntime: 1h30m", "defaultRuntime: 1h30"), 14, "$.clusters[1].simulated.defaultRuntime: '1h30'"),
        (("labels: {kdispatch.io/gpu: a100}", "labels: {kdispatch.io/gpu: 1}"), 6, "$.clusters[0].labels[...]: Expected `str`"),
        (("  - name: b\n", "  - name: b\n    kueu: true\n"), 7, "$.clusters[1]: Object contains unknown field `kueu`"),
    ],
)
def test_errors_name_the_file_line_and_path(tmp_path: Path, edit: tuple[str, str], line: int, message: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG.replace(*edit))
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}:{line}: {message}"), str(err.value)
