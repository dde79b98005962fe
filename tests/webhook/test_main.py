"""``python -m webhook`` options: the config file it shares with the reconciler, priority classes."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.__main__ import build_parser, read_config
from webhook.priority import PriorityError, parse_mapping

ROOT = Path(__file__).parents[2]


def test_the_deployed_config_file_is_read() -> None:
    config = read_config(str(ROOT / "deploy" / "base" / "config.yaml"))
    assert config["nats"] == "tls://nats:4222"
    assert config["nkey"] == "/etc/kdispatch/nats-user/nkey.seed"  # its own user (docs/security.md)
    assert config["nats_tls"].cert == "/etc/kdispatch/nats-tls/tls.crt"
    assert config["replicas"] == 3  # streams created by the webhook first are replicated like the reconciler's
    assert config["priority_classes"]["high"] > config["priority_classes"]["low"]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("policy:\n  priorityClasses:\n    high: lots\n", "policy.priorityClasses must map names to integers"),
        ("nats:\n  replicas: 0\n", "nats.replicas must be a positive integer"),
        ("- a list\n", "expected a mapping"),
        ("nats: [unclosed\n", "config.yaml"),
    ],
)
def test_config_errors_name_the_field(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(SystemExit) as err:
        read_config(str(path))
    assert fragment in str(err.value)


def test_priority_class_mapping() -> None:
    assert parse_mapping("high=1000, low=-5,") == {"high": 1000, "low": -5}
    with pytest.raises(PriorityError, match="expected NAME=INTEGER"):
        parse_mapping("high")


def test_defaults() -> None:
    args = build_parser().parse_args([])
    assert (args.port, args.publish_timeout, args.nats, args.exit_with_parent) == (9443, 1.0, None, False)
