"""The configuration file (YAML): NATS, policy (profiles, priority classes, timeouts), clusters.

Decoded strictly (unknown fields are errors with their path) so a typo stops start-up with a
clear message instead of being ignored. Durations accept integers (milliseconds) or strings
like ``"90s"``, ``"5m"``, ``"250ms"``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import yaml
from msgspec import Struct, field

from eventlog import events as ev

_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, None: 1}


class ConfigError(ValueError):
    def __init__(self, message: str, *, path: str = "$", source: str = "") -> None:
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{path}: {message}")
        self.path = path
        self.message = message


def parse_duration_ms(value: int | str, *, path: str = "$") -> int:
    if isinstance(value, int):
        return value
    m = _DURATION.match(value)
    if not m:
        raise ConfigError(f"{value!r} is not a duration; use e.g. 90s, 5m, 250ms or an integer of ms", path=path)
    return int(m.group(1)) * _UNIT_MS[m.group(2)]


class TlsConfig(Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    ca: str | None = None
    cert: str | None = None
    key: str | None = None


class NatsConfig(Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    url: str | None = None  # None: start the embedded nats-server
    creds: str | None = None
    tls: TlsConfig | None = None
    replicas: int = 1


class ProfileConfig(Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    name: str
    filters: list[str | ev.FilterSpec] = field(default_factory=list)
    scores: list[str | ev.ScoreSpec] = field(default_factory=list)
    strategy: ev.StrategySpec = field(default_factory=ev.StrategySpec)
    round_timeout: int | str = "60s"
    dispatch_mode: ev.DispatchMode = "MustBeAdmitted"


class PolicyConfig(Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    worker_lost_timeout: int | str = "60s"
    claim_ttl: int | str = "120s"
    requeue_backoff: int | str = "10s"
    priority_classes: dict[str, int] = field(default_factory=dict)
    profiles: list[ProfileConfig] = field(default_factory=list)


class SimulatedConfig(Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    capacity: dict[str, int | str] = field(default_factory=dict)
    admission_latency: int | str = "0ms"
    default_runtime: int | str = "30s"


class SecretRef(Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    name: str
    namespace: str = "kdispatch-system"
    key: str = "kubeconfig"


class KubeconfigConfig(Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    path: str | None = None
    secret_ref: SecretRef | None = None
    context: str | None = None


class ClusterConfig(Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[ev.Taint] = field(default_factory=list)
    worker_lost_timeout: int | str | None = None
    kubeconfig: KubeconfigConfig | None = None
    simulated: SimulatedConfig | None = None
    kueue: bool | None = None  # does the worker run Kueue? None: detect (ClusterQueues served)
    heartbeat_interval: int | str = "5s"
    heartbeat_timeout: int | str = "3s"


class ManagerConfig(Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    kubeconfig: KubeconfigConfig | None = None  # None with no simulated clusters: in-cluster config
    id: str = "kdispatch"  # the kdispatch.io/origin label on remote copies: unique per manager
    resync: int | str = "5m"  # list again (all watches, manager and workers) this often
    gc_interval: int | str = "30s"  # remote copies no live placement wants are deleted this often


class Config(Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    nats: NatsConfig = field(default_factory=NatsConfig)
    data_dir: str = ".kdispatch"
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    clusters: list[ClusterConfig] = field(default_factory=list)
    manager: ManagerConfig | None = None


def load_config(path: str | Path | None) -> Config:
    """Read and validate a config file; ``None`` gives the defaults."""
    if path is None:
        return Config()
    source = str(path)
    try:
        raw: Any = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(str(err), source=source) from None
    return decode_config(raw, source=source)


def decode_config(raw: Any, *, source: str = "") -> Config:
    try:
        config = msgspec.convert(raw, Config)
    except msgspec.ValidationError as err:
        text = str(err)
        path = text.rsplit(" - at `", 1)[1].rstrip("`") if " - at `" in text else "$"
        raise ConfigError(text.split(" - at `")[0], path=path, source=source) from None
    _check_unknown_fields(raw, config, path="$", source=source)
    _check_durations(config, path="$", source=source)
    return config


def _check_unknown_fields(raw: Any, value: Any, *, path: str, source: str) -> None:
    """The event structs embedded in the config (strategy, filter/score specs, taints) accept
    unknown fields, and use snake_case: without this check ``stepSize: 3`` would be dropped
    without a word. Same error as msgspec gives for the config's own structs."""
    if isinstance(value, msgspec.Struct) and isinstance(raw, dict):
        fields = {f.encode_name: f.name for f in msgspec.structs.fields(type(value))}
        for key, item in raw.items():
            if key not in fields:
                squashed = {name.replace("_", "").lower(): name for name in fields}
                hint = squashed.get(str(key).replace("_", "").lower())
                message = f"Object contains unknown field `{key}`" + (f" (the field is `{hint}`)" if hint else "")
                raise ConfigError(message, path=path, source=source)
            _check_unknown_fields(item, getattr(value, fields[key]), path=f"{path}.{key}", source=source)
    elif isinstance(value, list) and isinstance(raw, list):
        for i, (r, v) in enumerate(zip(raw, value, strict=False)):
            _check_unknown_fields(r, v, path=f"{path}[{i}]", source=source)
    elif isinstance(value, dict) and isinstance(raw, dict):
        for key, item in raw.items():
            if key in value:
                _check_unknown_fields(item, value[key], path=f"{path}.{key}", source=source)


_DURATION_TYPES = (int | str, int | str | None)


def _check_durations(value: Any, *, path: str, source: str) -> None:
    """Every duration field (typed ``int | str`` on a config struct) parses, so a bad one stops
    start-up with its path instead of failing later where it is first used."""
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check_durations(item, path=f"{path}[{i}]", source=source)
        return
    if not isinstance(value, msgspec.Struct) or type(value).__module__ != __name__:
        return
    for info in msgspec.structs.fields(type(value)):
        item = getattr(value, info.name)
        where = f"{path}.{info.encode_name}"
        if info.type in _DURATION_TYPES and isinstance(item, str):
            try:
                parse_duration_ms(item, path=where)
            except ConfigError as err:
                raise ConfigError(err.message, path=where, source=source) from None
        else:
            _check_durations(item, path=where, source=source)
