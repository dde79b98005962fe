"""The configuration file (YAML): NATS, policy (profiles, priority classes, timeouts), clusters.

Decoded once, strictly, at the edge: unknown fields are errors with their path, so a typo stops
start-up with a clear message instead of being ignored; durations (``"90s"``, ``"5m"``,
``"250ms"``, integers of ms; ``eventlog.kube.duration``) are integers of milliseconds and
quantities (``"16Gi"``, ``"500m"``) integers of units by the time a ``Config`` exists. Nothing
downstream parses a string of the file again. Errors name the file, the line when the file is at
hand, and the JSON path: ``config.yaml:14: $.clusters[2].workerLostTimeout: '5 min' is not a
duration; ...``.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin

import msgspec
import yaml
from msgspec import Struct, field

from eventlog import events as ev
from eventlog.kube.duration import DurationError, parse_duration_ms
from eventlog.kube.quantity import to_units
from eventlog.kube.yamlpath import line_at

# Field types of the decoded config. The markers tell the decoder which fields hold a duration or
# a resource list in the file; the values themselves are plain ints, so they go into events
# (``PolicyLoaded``, ``ClusterRegistered``) exactly as before.
_DURATION = msgspec.Meta(ge=0, description="a duration in milliseconds (the file says 90s, 5m, 250ms or ms)")
_QUANTITIES = msgspec.Meta(description="resource quantities: cpu in millicores, the rest in units")
Ms = Annotated[int, _DURATION]
Quantities = Annotated[dict[str, int], _QUANTITIES]
T = TypeVar("T")


class ConfigError(ValueError):
    """``source:line[:column]: $.path: message``; ``path=""`` for a problem of the file as a whole
    (unreadable, not UTF-8, not YAML, empty)."""

    def __init__(
        self, message: str, *, path: str = "$", source: str = "", line: int | None = None, column: int | None = None
    ) -> None:
        where = source + ("" if line is None else f":{line}") + ("" if line is None or column is None else f":{column}")
        super().__init__(f"{where + ': ' if source else ''}{path + ': ' if path else ''}{message}")
        self.path = path
        self.message = message
        self.line = line
        self.column = column


class TlsConfig(Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    ca: str | None = None
    cert: str | None = None
    key: str | None = None


class NatsConfig(Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    url: str | None = None  # None: start the embedded nats-server
    creds: str | None = None
    nkey: str | None = None  # a user nkey seed file (eventlog.natsauth; docs/security.md)
    tls: TlsConfig | None = None
    replicas: int = 1


def default_nominated_hold(strategy: str) -> ev.NominatedHold:
    """What a nominated, not yet admitted copy holds when a profile does not say.

    AllAtOnce: nothing, as MultiKueue's copies wait in the workers' queues without holding quota.
    Its round never times out, so a copy queued behind others costs nothing, while holding the
    job's demand on every nominated cluster turns other jobs away from all of them at once (on the
    Alibaba trace it made the mean wait many times MultiKueue's, through needless preemptions).
    TopK and Incremental: every nominated cluster, as before, so that a burst of jobs does not
    all go to the one cluster with the most room and wait out a round timeout there; holding on
    the best-ranked one only did worse on that trace (docs/simulate.md, "What holds capacity").
    The event's own default (absent: "all") is what logs from before the field mean, so a
    configured profile always records the value it runs with.
    """
    return "none" if strategy == "AllAtOnce" else "all"


class ProfileConfig(Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    name: str
    filters: list[str | ev.FilterSpec] = field(default_factory=list)
    scores: list[str | ev.ScoreSpec] = field(default_factory=list)
    strategy: ev.StrategySpec = field(default_factory=ev.StrategySpec)
    round_timeout_ms: Ms = field(default=60_000, name="roundTimeout")
    dispatch_mode: ev.DispatchMode = "MustBeAdmitted"

    def __post_init__(self) -> None:
        if self.strategy.nominated_hold is None:
            hold = default_nominated_hold(self.strategy.type)
            self.strategy = msgspec.structs.replace(self.strategy, nominated_hold=hold)


class PolicyConfig(Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    worker_lost_timeout_ms: Ms = field(default=60_000, name="workerLostTimeout")
    claim_ttl_ms: Ms = field(default=120_000, name="claimTtl")
    requeue_backoff_ms: Ms = field(default=10_000, name="requeueBackoff")
    priority_classes: dict[str, int] = field(default_factory=dict)
    profiles: list[ProfileConfig] = field(default_factory=list)


class SimulatedConfig(Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    capacity: Quantities = field(default_factory=dict)
    admission_latency_ms: Ms = field(default=0, name="admissionLatency")
    default_runtime_ms: Ms = field(default=30_000, name="defaultRuntime")


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
    worker_lost_timeout_ms: Ms | None = field(default=None, name="workerLostTimeout")
    kubeconfig: KubeconfigConfig | None = None
    simulated: SimulatedConfig | None = None
    kueue: bool | None = None  # does the worker run Kueue? None: detect (ClusterQueues served)
    heartbeat_interval_ms: Ms = field(default=5_000, name="heartbeatInterval")
    heartbeat_timeout_ms: Ms = field(default=3_000, name="heartbeatTimeout")


class ManagerConfig(Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    kubeconfig: KubeconfigConfig | None = None  # None with no simulated clusters: in-cluster config
    id: str = "kdispatch"  # the kdispatch.io/origin label on remote copies: unique per manager
    # list again (all watches, manager and workers) this often
    resync_ms: Ms = field(default=300_000, name="resync")
    # remote copies no live placement wants are deleted this often
    gc_interval_ms: Ms = field(default=30_000, name="gcInterval")


class WebConfig(Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    """Who may read the API and the page (docs/api.md, "Access"). ``none``: anyone who reaches
    the port (the demo, loopback); ``kubernetes``: a bearer token, checked with the manager's
    TokenReview, sees only the namespaces whose Jobs its user may list (SubjectAccessReview)."""

    authorization: Literal["none", "kubernetes"] = "none"
    # how long a token's user and a (user, namespace) verdict are reused
    cache_ttl_ms: Ms = field(default=10_000, name="cacheTtl")


class Config(Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    nats: NatsConfig = field(default_factory=NatsConfig)
    data_dir: str = ".kdispatch"
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    clusters: list[ClusterConfig] = field(default_factory=list)
    manager: ManagerConfig | None = None
    web: WebConfig = field(default_factory=WebConfig)
    # The queue configuration (Kueue objects, a file or a directory; docs/tenancy.md), as
    # ``serve --queues`` gives it (which wins). Read by ``eventlog.kube.kueue`` at start-up.
    queues: str | None = None


CONFIG_FILE = "a kdispatch config file: a YAML mapping of nats:, dataDir:, policy:, clusters:, manager:, web:, queues:"


def load_config(path: str | Path | None) -> Config:
    """Read and validate a config file; ``None`` gives the defaults."""
    if path is None:
        return Config()
    raw, text = read_yaml(path, expected=CONFIG_FILE)
    return decode_config(raw, source=str(path), text=text)


def read_text(path: str | Path, *, expected: str) -> str:
    """The text of a file a person wrote or handed over: UTF-8 (a BOM is fine), not empty.

    Errors (``ConfigError``) name the file, the line and column of a byte that is not UTF-8, and
    what the file should hold (``expected``), instead of a ``UnicodeDecodeError`` traceback.
    """
    source = str(path)
    try:
        data = Path(path).read_bytes()
    except IsADirectoryError:
        raise ConfigError(f"is a directory; expected {expected}", path="", source=source) from None
    except OSError as err:
        raise ConfigError(f"cannot read it: {err.strerror or err}", path="", source=source) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        start = data.rfind(b"\n", 0, err.start) + 1
        raise ConfigError(
            f"not UTF-8 text: byte 0x{data[err.start]:02x} cannot be read ({err.reason}); "
            "save the file as UTF-8 (Latin-1 and other encodings are not read)",
            path="",
            source=source,
            line=data.count(b"\n", 0, err.start) + 1,
            column=len(data[start : err.start].decode("utf-8", "replace")) + 1,
        ) from None
    if not text.strip():
        raise ConfigError(f"the file is empty; expected {expected}", path="", source=source)
    return text


def read_yaml(path: str | Path, *, expected: str) -> tuple[Any, str]:
    """A YAML file as (parsed document, its text). A syntax error gives its line and column; a
    file with no document (nothing, comments, a bare ``---``) is an error saying what it should
    hold."""
    source = str(path)
    text = read_text(path, expected=expected)
    try:
        raw = yaml.safe_load(text)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        what = err.problem or err.context or "not YAML"
        context = err.context if err.problem and err.context else None
        if context and err.context_mark is not None and err.context_mark is not mark:
            context += f" that starts at line {err.context_mark.line + 1} column {err.context_mark.column + 1}"
        raise ConfigError(
            f"invalid YAML: {what}" + (f" ({context})" if context else ""),
            path="",
            source=source,
            line=None if mark is None else mark.line + 1,
            column=None if mark is None else mark.column + 1,
        ) from None
    except yaml.reader.ReaderError as err:  # a character YAML does not allow: placed by its position
        before = text[: err.position]
        code = err.character if isinstance(err.character, int) else ord(err.character)
        raise ConfigError(
            f"invalid YAML: the control character U+{code:04X} is not allowed here ({err.reason})",
            path="",
            source=source,
            line=before.count("\n") + 1,
            column=err.position - (before.rfind("\n") + 1) + 1,
        ) from None
    except yaml.YAMLError as err:
        raise ConfigError(f"invalid YAML: {err}", path="", source=source) from None
    if raw is None:
        raise ConfigError(f"the file holds only comments or nothing; expected {expected}", path="", source=source)
    return raw, text


def decode_config(raw: Any, *, source: str = "", text: str | None = None) -> Config:
    """``raw`` (the parsed YAML) as a ``Config``. ``text``, the file's own text, lets errors give
    the line too."""
    return decode(raw, Config, source=source, text=text)


def decode(raw: Any, into: type[T], *, source: str = "", text: str | None = None) -> T:
    """``raw`` as one of the config structs (``Config``, or ``PolicyConfig`` for a policy file)."""
    try:
        converted = _convert_units(raw, into, path="$")
        value = msgspec.convert(converted, into)
        _check_unknown_fields(raw, value, path="$")
    except _Invalid as err:
        raise ConfigError(err.message, path=err.path, source=source, line=line_of(text, err.path)) from None
    except msgspec.ValidationError as err:
        message = str(err)
        path = message.rsplit(" - at `", 1)[1].rstrip("`") if " - at `" in message else "$"
        message = message.split(" - at `")[0]
        raise ConfigError(message, path=path, source=source, line=line_of(text, path)) from None
    return value


class _Invalid(Exception):
    def __init__(self, message: str, path: str) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


def _convert_units(raw: Any, tp: Any, *, path: str) -> Any:
    """A copy of ``raw`` with every duration and quantity field of ``tp`` as its integer, so that
    msgspec then sees plain ints. Anything of the wrong shape is left for msgspec to report."""
    origin = get_origin(tp)
    if origin is Annotated:
        base, *marks = get_args(tp)
        if _DURATION in marks and raw is not None:
            try:
                return parse_duration_ms(raw)
            except DurationError as err:
                raise _Invalid(str(err), path) from None
        if _QUANTITIES in marks and isinstance(raw, dict):
            return {name: _quantity(name, amount, path=path) for name, amount in raw.items()}
        return _convert_units(raw, base, path=path)
    if origin in (Union, types.UnionType):
        for member in get_args(tp):  # the config's unions have at most one member holding units
            if _holds_units(member):
                return _convert_units(raw, member, path=path)
        return raw
    if origin is list and isinstance(raw, list):
        (item,) = get_args(tp)
        return [_convert_units(x, item, path=f"{path}[{i}]") for i, x in enumerate(raw)]
    if origin is dict and isinstance(raw, dict):
        _, item = get_args(tp)
        return {k: _convert_units(v, item, path=f"{path}.{k}") for k, v in raw.items()}
    if _is_config_struct(tp) and isinstance(raw, dict):
        fields = {f.encode_name: f.type for f in msgspec.structs.fields(tp)}
        return {
            k: _convert_units(v, fields[k], path=f"{path}.{k}") if k in fields else v for k, v in raw.items()
        }
    return raw


def _holds_units(tp: Any) -> bool:
    origin = get_origin(tp)
    if origin is Annotated:
        return _DURATION in get_args(tp)[1:] or _QUANTITIES in get_args(tp)[1:]
    if origin in (list, dict):
        return _holds_units(get_args(tp)[-1])
    return _is_config_struct(tp)


def _is_config_struct(tp: Any) -> bool:
    """One of this module's structs (the event structs embedded in the config hold no units)."""
    return isinstance(tp, type) and issubclass(tp, Struct) and tp.__module__ == __name__


def _quantity(name: Any, amount: Any, *, path: str) -> Any:
    if not isinstance(amount, int | str) or not isinstance(name, str):
        return amount  # msgspec says what is wrong with it
    try:
        value = to_units(name, amount)
    except ValueError as err:
        raise _Invalid(str(err), path) from None
    if value < 0:
        raise _Invalid(f"{name}: {amount!r} is negative", path)
    return value


def _check_unknown_fields(raw: Any, value: Any, *, path: str) -> None:
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
                raise _Invalid(message, path)
            _check_unknown_fields(item, getattr(value, fields[key]), path=f"{path}.{key}")
    elif isinstance(value, list) and isinstance(raw, list):
        for i, (r, v) in enumerate(zip(raw, value, strict=False)):
            _check_unknown_fields(r, v, path=f"{path}[{i}]")
    elif isinstance(value, dict) and isinstance(raw, dict):
        for key, item in raw.items():
            if key in value:
                _check_unknown_fields(item, value[key], path=f"{path}.{key}")




def line_of(text: str | None, path: str) -> int | None:
    """The line (1-based) of the YAML ``text`` where the JSON ``path`` (``$.clusters[2].name``)
    is written, or ``None`` if it is not there as such. Mapping keys may hold dots
    (``nvidia.com/gpu``), so a key is matched against the rest of the path, longest first."""
    if text is None or not path.startswith("$"):
        return None
    try:
        node: Any = yaml.compose(text)
    except yaml.YAMLError:
        return None
    return None if node is None else line_at(node, path, nearest=False)
