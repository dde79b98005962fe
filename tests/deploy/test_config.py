"""The config in the ConfigMap is valid, every key in it means something, and a bad config stops
``kdispatch serve`` (the reconciler container's command) with the field's path."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from reconciler.cli import build_parser
from reconciler.config import Config, decode_config
from reconciler.core import validate_policy
from reconciler.policy import policy_event
from tests.deploy.conftest import DEPLOY, OVERLAYS, find, one, rendered

CONFIG_MOUNT = "/etc/kdispatch/config"


def shipped_config_text(overlay: str = "overlays/cert-manager") -> str:
    (configmap,) = [
        o
        for o in find(rendered(overlay), "ConfigMap")
        if o["metadata"]["name"].startswith("kdispatch-config-")
    ]
    text: str = configmap["data"]["config.yaml"]
    return text


def ignored_keys(raw: Any, value: Any, path: str = "$") -> list[str]:
    """Keys of ``raw`` that decoding dropped without a word (structs that allow unknown fields)."""
    found: list[str] = []
    if isinstance(value, msgspec.Struct) and isinstance(raw, dict):
        fields = {f.encode_name: f.name for f in msgspec.structs.fields(type(value))}
        for key, item in raw.items():
            if key not in fields:
                found.append(f"{path}.{key}")
            else:
                found += ignored_keys(item, getattr(value, fields[key]), f"{path}.{key}")
    elif isinstance(value, list) and isinstance(raw, list):
        for i, (r, v) in enumerate(zip(raw, value, strict=True)):
            found += ignored_keys(r, v, f"{path}[{i}]")
    elif isinstance(value, dict) and isinstance(raw, dict):
        for key, item in raw.items():
            found += ignored_keys(item, value[key], f"{path}.{key}")
    return found


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_configmap_config_decodes_and_every_key_counts(overlay: str) -> None:
    raw = yaml.safe_load(shipped_config_text(overlay))
    config = decode_config(raw, source="ConfigMap kdispatch-config")
    assert ignored_keys(raw, config) == []
    assert config.nats.replicas == 3, "the NATS overlay runs 3 servers: streams at 3 replicas"
    (nats,) = find(rendered(overlay), "StatefulSet", "nats")
    assert config.nats.replicas <= nats["spec"]["replicas"]
    policy = policy_event(config.policy)  # what the leader records as PolicyLoaded
    assert [p.name for p in policy.profiles] == ["default"]
    assert validate_policy(policy) == [], "every plugin and strategy in the profiles exists"


def test_ignored_keys_are_found() -> None:
    """The belt to decode_config's braces: a key that decoding dropped is reported."""
    raw = {"policy": {"profiles": [{"name": "x", "strategy": {"type": "Incremental", "step_size": 3}}]}}
    config = decode_config(raw)
    raw["policy"]["profiles"][0]["strategy"]["stepSize"] = 3  # type: ignore[index]
    assert ignored_keys(raw, config) == ["$.policy.profiles[0].strategy.stepSize"]


def test_the_config_is_the_file_both_containers_read() -> None:
    objects = rendered("overlays/cert-manager")
    for name in ("kdispatch-reconciler", "kdispatch-webhook"):
        spec = one(objects, "Deployment", name)["spec"]["template"]["spec"]
        (container,) = spec["containers"]
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "config"]
        assert mount["mountPath"] == CONFIG_MOUNT and mount["readOnly"] is True
        assert f"--config={CONFIG_MOUNT}/config.yaml" in container["args"]


def test_reconciler_args_are_accepted_by_kdispatch_serve() -> None:
    deployment = one(rendered("overlays/cert-manager"), "Deployment", "kdispatch-reconciler")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["kdispatch"]
    parser, _ = build_parser()
    args = parser.parse_args(container["args"])
    assert args.command == "serve"
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert args.metrics_port == ports["metrics"]
    assert args.leader_id == "$(POD_NAME)"
    assert any(e["name"] == "POD_NAME" for e in container["env"]), "the leader id comes from the downward API"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}


BAD_CONFIGS: dict[str, tuple[Any, str, str, str]] = {
    # name: (edit of the shipped config, path the message must name, words it must contain,
    #        text on the line of the file that the message names)
    "typo": (
        lambda c: c["policy"]["profiles"][0].update(roundTimout="30s"),
        "$.policy.profiles[0]",
        "roundTimout",
        "- ",
    ),
    "type": (lambda c: c["nats"].update(replicas="three"), "$.nats.replicas", "Expected `int`", "replicas: three"),
    "missing": (
        lambda c: c["clusters"][0]["kubeconfig"].update(secretRef={"key": "k"}),
        "$.clusters[0].kubeconfig.secretRef",
        "name",
        "secretRef:",
    ),
    "duration": (
        lambda c: c["policy"].update(workerLostTimeout="a minute"),
        "$.policy.workerLostTimeout",
        "'a minute' is not a duration; use e.g. 90s, 5m",
        "workerLostTimeout: a minute",
    ),
    "duration-in-words": (
        lambda c: c["policy"]["profiles"][0].update(roundTimeout="5 min"),
        "$.policy.profiles[0].roundTimeout",
        "'5 min' is not a duration; use e.g. 90s, 5m, 1h30m, 250ms or an integer of ms (did you mean '5m'?)",
        "roundTimeout: 5 min",
    ),
    "camel-case-strategy": (
        lambda c: c["policy"]["profiles"][0]["strategy"].update(stepSize=3),
        "$.policy.profiles[0].strategy",
        "unknown field `stepSize` (the field is `step_size`)",
        "strategy:",
    ),
    "cluster-duration": (
        lambda c: c["clusters"][0].update(heartbeatInterval="often"),
        "$.clusters[0].heartbeatInterval",
        "not a duration",
        "heartbeatInterval: often",
    ),
    "sub-millisecond": (
        lambda c: c["clusters"][0].update(heartbeatTimeout="1500us"),
        "$.clusters[0].heartbeatTimeout",
        "'1500us' is not a whole number of milliseconds (kdispatch counts time in ms) (did you mean '2ms'?)",
        "heartbeatTimeout: 1500us",
    ),
}


def test_invalid_config_stops_serve_with_the_file_line_and_field_path(tmp_path: Path) -> None:
    """Through the real entry point (the container's ``kdispatch serve``), all cases at once."""
    kdispatch = Path(sys.executable).parent / "kdispatch"
    running = {}
    for name, (edit, *_) in BAD_CONFIGS.items():
        config = yaml.safe_load(shipped_config_text())
        edit(config)
        bad = tmp_path / f"{name}.yaml"
        bad.write_text(yaml.safe_dump(config))
        running[name] = subprocess.Popen(
            [str(kdispatch), "serve", f"--config={bad}", "--metrics-port=0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    for name, proc in running.items():
        _, stderr = proc.communicate(timeout=60)
        _, path, words, on_line = BAD_CONFIGS[name]
        assert proc.returncode == 2, (name, stderr)
        bad = tmp_path / f"{name}.yaml"
        where = re.match(rf"kdispatch serve: invalid config: {re.escape(str(bad))}:(\d+): ", stderr)
        assert where, (name, stderr)
        assert on_line in bad.read_text().splitlines()[int(where.group(1)) - 1], (name, stderr)
        assert f"{path}: " in stderr and words in stderr, (name, stderr)
        assert len(stderr.splitlines()) == 1, f"{name}: one line a person can act on, no traceback"


def test_decode_error_is_a_config_error_for_the_loader() -> None:
    with pytest.raises(ValueError, match=r"\$\.policy\.profiles\[0\]: .*roundTimout"):
        decode_config({"policy": {"profiles": [{"name": "x", "roundTimout": "5s"}]}})
    assert isinstance(decode_config({}), Config)
    assert (DEPLOY / "base" / "config.yaml").read_text() == shipped_config_text()
