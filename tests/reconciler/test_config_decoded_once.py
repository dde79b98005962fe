"""The config is decoded once: after ``load_config`` nothing that ``serve``/``demo`` build from it
parses a duration string again (the values travel as ints of milliseconds)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from eventlog.kube import duration
from reconciler.config import load_config
from reconciler.demo.setup import config_document
from reconciler.policy import policy_event
from reconciler.service.clusters.setup import ClusterSet, registration
from reconciler.service.clusters.simulated import SimCluster


class Parser:
    """Stands in for ``parse_duration_ms`` wherever a module holds it; counts, or refuses."""

    def __init__(self) -> None:
        self.real = duration.parse_duration_ms
        self.calls: list[Any] = []
        self.refuse = False

    def __call__(self, value: int | str) -> int:
        if self.refuse:
            raise AssertionError(f"a duration parsed again after the config was decoded: {value!r}")
        self.calls.append(value)
        return self.real(value)


@pytest.fixture
def parser(monkeypatch: pytest.MonkeyPatch) -> Parser:
    """Every binding of the parser (``from ... import parse_duration_ms`` included) replaced."""
    stand_in = Parser()
    for module in list(sys.modules.values()):
        for name, value in list(vars(module).items()):
            if value is stand_in.real:
                monkeypatch.setattr(module, name, stand_in)
    return stand_in


async def test_the_demo_wiring_parses_no_duration_after_decoding(parser: Parser, tmp_path: Path) -> None:
    doc = config_document(tmp_path)  # the demo's own world: four simulated clusters, its policy
    doc["manager"] = {"resync": "10m", "gcInterval": "45s"}
    doc["clusters"][0] |= {"workerLostTimeout": "2s", "heartbeatTimeout": "1500ms"}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc))

    config = load_config(path)
    assert len(parser.calls) == 16 and "10m" in parser.calls, "the decoder parses what the file says, once"

    parser.refuse = True
    policy = policy_event(config.policy)
    clusters = await ClusterSet.from_config(config)
    try:
        events = [registration(c, capacity=clusters.capacities[c.name])[0] for c in config.clusters]
    finally:
        await clusters.close()

    # and the values arrived, as numbers of the right size
    assert (policy.worker_lost_timeout_ms, policy.profiles[0].round_timeout_ms) == (4_000, 10_000)
    assert (clusters.resync_s, clusters.gc_interval_s) == (600, 45.0)
    assert events[0].worker_lost_timeout_ms == 2_000 and events[1].worker_lost_timeout_ms is None
    first = clusters.workers[config.clusters[0].name]
    assert isinstance(first, SimCluster)
    assert first.model.admission_latency_ms == 200 and first.model.capacity["memory"] == 512 * 2**30
