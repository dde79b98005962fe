"""A 3-node JetStream cluster on loopback (embedded nats-servers), for tests that lose a node."""

from __future__ import annotations

import contextlib
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from eventlog.embedded import EmbeddedError, EmbeddedNats, free_port
from tests.waiting import eventually_blocking


@contextlib.contextmanager
def three_nodes(tmp_path: Path) -> Iterator[list[EmbeddedNats]]:
    nodes = _start_three(tmp_path)
    try:
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def _start_three(tmp_path: Path, *, attempts: int = 3) -> list[EmbeddedNats]:
    """Ports are picked free and then bound by another process: something else on the machine
    can take one in between. That is the only start-up failure retried (with fresh ports)."""
    for attempt in range(attempts):
        ports = [free_port() for _ in range(3)]
        routes = [f"nats://127.0.0.1:{p}" for p in ports]
        nodes = [
            EmbeddedNats(
                data_dir=tmp_path / f"try{attempt}" / f"n{i}" if attempt else tmp_path / f"n{i}",
                server_name=f"n{i}",
                cluster_name="kd-test",
                cluster_port=ports[i],
                routes=[r for j, r in enumerate(routes) if j != i],
            )
            for i in range(3)
        ]
        try:
            for node in nodes:
                node.start(wait=False)
            for node in nodes:
                node.wait_ready()
            return nodes
        except EmbeddedError as err:
            for node in nodes:
                node.stop()
            if "address already in use" not in str(err) or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def meta_leader(nodes: list[EmbeddedNats], *, timeout_s: float = 30.0) -> EmbeddedNats:
    """The node that leads the JetStream meta group (creates consumers, places streams), as its
    monitoring endpoint says once the group has elected one."""

    def elected() -> EmbeddedNats | None:
        for node in nodes:
            if not node.running():
                continue
            with contextlib.suppress(OSError, ValueError):
                with urllib.request.urlopen(f"http://127.0.0.1:{node.monitor_port}/jsz", timeout=2) as resp:
                    leader = json.load(resp).get("meta_cluster", {}).get("leader")
                for candidate in nodes:
                    if leader and candidate.server_name == leader:
                        return candidate
        return None

    leader: EmbeddedNats = eventually_blocking(elected, timeout_s=timeout_s, what="a JetStream meta leader")
    return leader
