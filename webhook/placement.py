"""Placement annotations: parse, validate, normalize (DESIGN.md, "Placement spec").

Read from ``kdispatch.io/<field>`` and, for four fields, from the Kueue composable-dispatcher
names ``kueue.x-k8s.io/<field>``. The canonical form is one annotation, ``kdispatch.io/placement``:
camelCase JSON (as users write Kubernetes objects), keys sorted, every default filled. Parsing the
canonical annotation with the per-field annotations laid over it gives the same placement again,
which is why mutating a normalized object is a no-op.

Every problem becomes a ``PlacementIssue`` naming the annotation, the JSON path inside it, what
was found, what is accepted and, for near misses, a did-you-mean.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

import msgspec

from eventlog import events as ev
from eventlog.kube.duration import DurationError, parse_duration_ms
from eventlog.kube.names import (
    CLUSTER_ANNOTATION,
    EXPECTED_DURATION_ANNOTATION,
    PLACEMENT_ANNOTATION,
    POD_SETS_ANNOTATION,
    PREFIX,
    PRIORITY_ANNOTATION,
    RUNTIME_ANNOTATION,
    STATUS_ANNOTATION,
    WORKLOAD_ANNOTATION,
)
from eventlog.kube.names import KUEUE_PREFIX as ALIAS_PREFIX

FIELDS = (
    "cluster-selector",
    "cluster-affinity",
    "cluster-tolerations",
    "dispatch-mode",
    "profile",
    "nominate",
    "cluster-names",
    "preemption-policy",
)
ALIASED_FIELDS = ("cluster-selector", "cluster-affinity", "cluster-tolerations", "dispatch-mode")
ALIAS_ANNOTATIONS = tuple(ALIAS_PREFIX + f for f in ALIASED_FIELDS)
KNOWN_ANNOTATIONS = (
    *(PREFIX + f for f in FIELDS),
    PLACEMENT_ANNOTATION,
    RUNTIME_ANNOTATION,
    EXPECTED_DURATION_ANNOTATION,
    CLUSTER_ANNOTATION,
    POD_SETS_ANNOTATION,
    PRIORITY_ANNOTATION,
    STATUS_ANNOTATION,
    WORKLOAD_ANNOTATION,
)
_NOT_PLACEMENT = (
    RUNTIME_ANNOTATION,
    EXPECTED_DURATION_ANNOTATION,
    CLUSTER_ANNOTATION,
    POD_SETS_ANNOTATION,
    PRIORITY_ANNOTATION,
    STATUS_ANNOTATION,
    WORKLOAD_ANNOTATION,
)

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
TOLERATION_OPERATORS = ("Equal", "Exists")
EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
DISPATCH_MODES = ("MustBeAdmitted", "BestEffort")
PREEMPTION_POLICIES = ("PreemptLowerPriority", "Never")
MAX_NOMINATE = 1000

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_INTEGER = re.compile(r"^-?[0-9]{1,18}$")

_json_decoder = msgspec.json.Decoder()
_json_encoder = msgspec.json.Encoder(order="sorted")
T = TypeVar("T")


class PlacementIssue(msgspec.Struct, frozen=True, kw_only=True):
    annotation: str
    path: str
    found: str
    accepted: str
    hint: str = ""

    def message(self) -> str:
        text = f"annotation {self.annotation}: at {self.path}: found {self.found}; accepted: {self.accepted}"
        return f"{text}; did you mean {self.hint}?" if self.hint else text


MAX_REPORTED = 20  # a denial message stays readable (and small) whatever the object holds


class PlacementError(ValueError):
    def __init__(self, issues: list[PlacementIssue]) -> None:
        lines = [i.message() for i in issues[:MAX_REPORTED]]
        if len(issues) > MAX_REPORTED:
            lines.append(f"... and {len(issues) - MAX_REPORTED} more problems")
        super().__init__("\n".join(lines))
        self.issues = issues


class _Invalid(Exception):
    """Internal: one field could not be read; the issue is already recorded."""


def _show(value: Any) -> str:
    text = _json_encoder.encode(value).decode() if not isinstance(value, _Missing) else "nothing"
    return text if len(text) <= 80 else text[:77] + "..."


class _Missing:
    pass


MISSING = _Missing()


def suggest(found: str, options: Iterable[str]) -> str:
    """Did-you-mean: a case-insensitive match first, then the closest spelling."""
    options = list(options)
    for option in options:
        if option.lower() == found.lower():
            return f'"{option}"'
    lowered = {o.lower(): o for o in options}
    close = difflib.get_close_matches(found.lower(), list(lowered), n=1, cutoff=0.6)
    return f'"{lowered[close[0]]}"' if close else ""


class _Reader:
    """Reads one annotation's JSON value, recording issues with their path."""

    def __init__(self, annotation: str, issues: list[PlacementIssue]) -> None:
        self.annotation = annotation
        self.issues = issues

    def fail(self, path: str, value: Any, *, accepted: str, hint: str = "") -> _Invalid:
        self.issues.append(PlacementIssue(annotation=self.annotation, path=path, found=_show(value), accepted=accepted, hint=hint))
        return _Invalid()

    def obj(self, value: Any, path: str, *, keys: Mapping[str, str]) -> dict[str, Any]:
        """An object whose keys are among ``keys`` (key -> canonical meaning); unknown keys fail."""
        if not isinstance(value, dict):
            raise self.fail(path, value, accepted="a JSON object")
        bad = False
        for key in value:
            if key not in keys:
                accepted = "fields " + ", ".join(sorted(set(keys)))
                issue = PlacementIssue(
                    annotation=self.annotation,
                    path=f"{path}.{key}",
                    found=f"unknown field {_show(key)}",
                    accepted=accepted,
                    hint=suggest(str(key), keys),
                )
                self.issues.append(issue)
                bad = True
        if bad:
            raise _Invalid()
        return value

    def enum(self, value: Any, path: str, *, options: tuple[str, ...]) -> str:
        if isinstance(value, str) and value in options:
            return value
        hint = suggest(value, options) if isinstance(value, str) else ""
        raise self.fail(path, value, accepted=", ".join(options), hint=hint)

    def string(self, value: Any, path: str, *, accepted: str = "a string") -> str:
        if not isinstance(value, str):
            raise self.fail(path, value, accepted=accepted)
        return value

    def each(self, values: list[Any], path: str, *, read: Callable[[Any, str], T]) -> list[T]:
        """Read every item, so one annotation reports all its problems at once."""
        out: list[T] = []
        failed = False
        for i, item in enumerate(values):
            try:
                out.append(read(item, f"{path}[{i}]"))
            except _Invalid:
                failed = True
        if failed:
            raise _Invalid()
        return out

    def label_key(self, value: Any, path: str, *, allow_empty: bool = False) -> str:
        key = self.string(value, path, accepted="a label key such as topology.kubernetes.io/region")
        if allow_empty and key == "":
            return key
        prefix, _, name = key.rpartition("/")
        if (prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix))) or len(name) > 63 or not _NAME.match(name):
            raise self.fail(path, value, accepted="a label key: [prefix/]name, name ≤63 alphanumerics, '-', '_', '.'")
        return key

    def label_value(self, value: Any, path: str) -> str:
        text = self.string(value, path, accepted="a label value (a string)")
        if text and (len(text) > 63 or not _NAME.match(text)):
            raise self.fail(path, value, accepted="a label value: ≤63 alphanumerics, '-', '_', '.', alphanumeric at both ends")
        return text


# ---- per field ---------------------------------------------------------------------------------


def _selector(r: _Reader, value: Any, *, path: str) -> dict[str, str]:
    if isinstance(value, str):
        value = _selector_string(r, value, path=path)
    if not isinstance(value, dict):
        raise r.fail(path, value, accepted='a JSON object of label -> value, or "key=value,key2=value2"')
    out: dict[str, str] = {}
    failed = False
    for key in sorted(value):
        try:
            out[r.label_key(key, f"{path}[{key!r}]")] = r.label_value(value[key], f"{path}[{key!r}]")
        except _Invalid:
            failed = True
    if failed:
        raise _Invalid()
    return out


def _selector_string(r: _Reader, text: str, *, path: str) -> Any:
    text = text.strip()
    if text.startswith("{"):
        return _json(r, text, path=path)
    out: dict[str, str] = {}
    for i, part in enumerate(p.strip() for p in text.split(",")):
        if not part:
            continue
        key, eq, val = part.partition("=")
        if not eq or val.startswith("="):
            raise r.fail(f"{path}[{i}]", part, accepted='"key=value" pairs separated by commas (or a JSON object)')
        out[key.strip()] = val.strip()
    return out


def _json(r: _Reader, text: str, *, path: str) -> Any:
    try:
        return _json_decoder.decode(text)
    except msgspec.DecodeError as err:
        raise r.fail(path, text, accepted=f"JSON ({err})") from None
    except RecursionError:
        raise r.fail(path, text, accepted="JSON nested less deeply") from None


_EXPRESSION_KEYS = {"key": "key", "operator": "operator", "values": "values"}
_TERM_KEYS = {"matchExpressions": "matchExpressions", "matchLabels": "matchLabels"}
_WEIGHTED_KEYS = {"weight": "weight", "preference": "term", "term": "term"}
_REQUIRED_LONG = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED_LONG = "preferredDuringSchedulingIgnoredDuringExecution"
_AFFINITY_KEYS = {"required": "required", "preferred": "preferred", _REQUIRED_LONG: "required", _PREFERRED_LONG: "preferred"}
_REQUIRED_OBJECT_KEYS = {"clusterSelectorTerms": "clusterSelectorTerms"}


def _expression(r: _Reader, value: Any, *, path: str) -> ev.MatchExpression:
    obj = r.obj(value, path, keys=_EXPRESSION_KEYS)
    key = r.label_key(obj.get("key"), f"{path}.key")
    op = r.enum(obj.get("operator", MISSING), f"{path}.operator", options=OPERATORS)
    raw_values = obj.get("values", [])
    if not isinstance(raw_values, list):
        raise r.fail(f"{path}.values", raw_values, accepted="a list of strings")
    values = r.each(raw_values, f"{path}.values", read=lambda v, p: r.string(v, p))
    if op in ("In", "NotIn"):
        if not values:
            raise r.fail(f"{path}.values", raw_values, accepted=f"at least one value with operator {op}")
        values = sorted(set(values))
    elif op in ("Exists", "DoesNotExist"):
        if values:
            raise r.fail(f"{path}.values", raw_values, accepted=f"no values with operator {op}")
    elif len(values) != 1 or not _INTEGER.match(values[0]):
        raise r.fail(f"{path}.values", raw_values, accepted=f'exactly one integer value with operator {op}, e.g. ["8"]')
    return ev.MatchExpression(key=key, operator=op, values=values)  # type: ignore[arg-type]


def _term(r: _Reader, value: Any, *, path: str) -> ev.SelectorTerm:
    obj = r.obj(value, path, keys=_TERM_KEYS)
    raw = obj.get("matchExpressions", [])
    if not isinstance(raw, list):
        raise r.fail(f"{path}.matchExpressions", raw, accepted="a list of {key, operator, values}")
    expressions = r.each(raw, f"{path}.matchExpressions", read=lambda v, p: _expression(r, v, path=p))
    labels = _selector(r, obj.get("matchLabels", {}), path=f"{path}.matchLabels")
    expressions += [ev.MatchExpression(key=k, operator="In", values=[v]) for k, v in labels.items()]
    if not expressions:
        raise r.fail(path, value, accepted="a term with at least one match expression")
    return ev.SelectorTerm(match_expressions=expressions)


def _weighted(r: _Reader, value: Any, *, path: str) -> ev.WeightedTerm:
    obj = r.obj(value, path, keys=_WEIGHTED_KEYS)
    weight = obj.get("weight", MISSING)
    if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
        raise r.fail(f"{path}.weight", weight, accepted="an integer from 1 to 100")
    if ("term" in obj) == ("preference" in obj):
        raise r.fail(path, value, accepted='exactly one of "preference" (or its short name "term") and a "weight"')
    key = "term" if "term" in obj else "preference"
    return ev.WeightedTerm(weight=weight, term=_term(r, obj[key], path=f"{path}.{key}"))


def _affinity(r: _Reader, value: Any, *, path: str) -> ev.ClusterAffinity:
    if isinstance(value, str):
        value = _json(r, value, path=path)
    obj = r.obj(value, path, keys=_AFFINITY_KEYS)
    for short, long in (("required", _REQUIRED_LONG), ("preferred", _PREFERRED_LONG)):
        if short in obj and long in obj:
            raise r.fail(f"{path}.{long}", long, accepted=f'either "{short}" or "{long}", not both')
    required: list[ev.SelectorTerm] = []
    preferred: list[ev.WeightedTerm] = []
    failed = False
    for key, raw in obj.items():
        here = f"{path}.{key}"
        try:
            if _AFFINITY_KEYS[key] == "required":
                if isinstance(raw, dict):
                    raw = r.obj(raw, here, keys=_REQUIRED_OBJECT_KEYS).get("clusterSelectorTerms", [])
                    here = f"{here}.clusterSelectorTerms"
                if not isinstance(raw, list):
                    raise r.fail(here, raw, accepted="a list of terms (an OR of {matchExpressions: [...]})")
                required = r.each(raw, here, read=lambda v, p: _term(r, v, path=p))
            else:
                if not isinstance(raw, list):
                    raise r.fail(here, raw, accepted="a list of {weight, preference}")
                preferred = r.each(raw, here, read=lambda v, p: _weighted(r, v, path=p))
        except _Invalid:
            failed = True
    if failed:
        raise _Invalid()
    return ev.ClusterAffinity(required=required, preferred=preferred)


_TOLERATION_KEYS = {k: k for k in ("key", "operator", "value", "effect", "tolerationSeconds")}


def _toleration(r: _Reader, value: Any, *, path: str) -> ev.Toleration:
    obj = r.obj(value, path, keys=_TOLERATION_KEYS)
    key = r.label_key(obj.get("key", ""), f"{path}.key", allow_empty=True)
    op = r.enum(obj.get("operator", "Equal"), f"{path}.operator", options=TOLERATION_OPERATORS)
    val = r.label_value(obj.get("value", ""), f"{path}.value")
    effect = obj.get("effect", "")
    if effect != "":
        effect = r.enum(effect, f"{path}.effect", options=EFFECTS)
    seconds = obj.get("tolerationSeconds")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int) or abs(seconds) > 2**53):
        raise r.fail(f"{path}.tolerationSeconds", seconds, accepted="an integer number of seconds")
    if op == "Exists" and val:
        raise r.fail(f"{path}.value", val, accepted='an empty value with operator "Exists"')
    if not key and op != "Exists":
        raise r.fail(f"{path}.operator", op, accepted='"Exists" when the key is empty (tolerate every taint)')
    if seconds is not None and effect != "NoExecute":
        raise r.fail(f"{path}.effect", effect, accepted='"NoExecute" when tolerationSeconds is set')
    return ev.Toleration(key=key, operator=op, value=val, effect=effect, toleration_seconds=seconds)  # type: ignore[arg-type]


def _tolerations(r: _Reader, value: Any, *, path: str) -> list[ev.Toleration]:
    if isinstance(value, str):
        value = _json(r, value, path=path)
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        raise r.fail(path, value, accepted="a JSON list of {key, operator, value, effect, tolerationSeconds}")
    return r.each(value, path, read=lambda v, p: _toleration(r, v, path=p))


def _names(r: _Reader, value: Any, *, path: str) -> list[str]:
    if isinstance(value, str):
        text = value.strip()
        value = _json(r, text, path=path) if text.startswith("[") else [p.strip() for p in text.split(",") if p.strip()]
    if not isinstance(value, list):
        raise r.fail(path, value, accepted='cluster names: "a,b" or a JSON list of strings')

    def one(v: Any, p: str) -> str:
        if not isinstance(v, str) or len(v) > 253 or not _DNS_SUBDOMAIN.match(v):
            raise r.fail(p, v, accepted="a cluster name (lower-case DNS name)")
        return v

    return sorted(set(r.each(value, path, read=one)))


def _nominate(r: _Reader, value: Any, *, path: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_NOMINATE:
        raise r.fail(path, value, accepted=f"a positive integer (1 to {MAX_NOMINATE}): how many clusters to nominate")
    return value


def _profile(r: _Reader, value: Any, *, path: str) -> str:
    if not isinstance(value, str) or len(value) > 63 or not _DNS_LABEL.match(value):
        raise r.fail(path, value, accepted="a profile name (lower-case DNS label, e.g. default)")
    return value


def _dispatch_mode(r: _Reader, value: Any, *, path: str) -> str:
    return r.enum(value, path, options=DISPATCH_MODES)


def _preemption_policy(r: _Reader, value: Any, *, path: str) -> str:
    return r.enum(value, path, options=PREEMPTION_POLICIES)


class _FieldReader(Protocol):
    def __call__(self, r: _Reader, value: Any, *, path: str) -> Any: ...


# field -> (Placement attribute, reader of one JSON value or annotation string)
_FIELD_READERS: dict[str, tuple[str, _FieldReader]] = {
    "cluster-selector": ("cluster_selector", _selector),
    "cluster-affinity": ("cluster_affinity", _affinity),
    "cluster-tolerations": ("cluster_tolerations", _tolerations),
    "dispatch-mode": ("dispatch_mode", _dispatch_mode),
    "profile": ("profile", _profile),
    "nominate": ("nominate", _nominate),
    "cluster-names": ("cluster_names", _names),
    "preemption-policy": ("preemption_policy", _preemption_policy),
}
_CANONICAL_KEYS = {
    "clusterSelector": "cluster-selector",
    "clusterAffinity": "cluster-affinity",
    "clusterTolerations": "cluster-tolerations",
    "dispatchMode": "dispatch-mode",
    "profile": "profile",
    "nominate": "nominate",
    "clusterNames": "cluster-names",
    "preemptionPolicy": "preemption-policy",
}


def _canonical(r: _Reader, value: Any) -> dict[str, Any]:
    """The fields of a ``kdispatch.io/placement`` annotation, read."""
    obj = r.obj(_json(r, value, path="$") if isinstance(value, str) else value, "$", keys={k: k for k in _CANONICAL_KEYS})
    out: dict[str, Any] = {}
    failed = False
    for key, raw in obj.items():
        attr, read = _FIELD_READERS[_CANONICAL_KEYS[key]]
        try:
            out[attr] = read(r, raw, path=f"$.{key}")
        except _Invalid:
            failed = True
    if failed:
        raise _Invalid()
    return out


_ALIASES = frozenset(ALIAS_ANNOTATIONS)
_NOT_PLACEMENT_SET = frozenset(_NOT_PLACEMENT)


def is_placement_annotation(name: str) -> bool:
    return name.startswith(PREFIX) or name in _ALIASES


def parse(annotations: Mapping[str, Any]) -> ev.Placement:
    """The normalized placement of an object's annotations; ``PlacementError`` lists every issue."""
    return parse_with_canonical(annotations)[0]


def parse_with_canonical(annotations: Mapping[str, Any]) -> tuple[ev.Placement, str]:
    """``parse`` and the canonical annotation value, memoized on the placement annotations."""
    # One pass over the object's annotations: this runs for every review, cache hit or not.
    items: list[tuple[str, Any]] = []
    size, cacheable = 0, True
    for k, v in annotations.items():
        if (k.startswith(PREFIX) or k in _ALIASES) and k not in _NOT_PLACEMENT_SET:
            items.append((k, v))
            if isinstance(v, str):
                size += len(v)
            else:
                cacheable = False
    items.sort()
    relevant = tuple(items)
    if cacheable and size <= _CACHED_SIZE:
        return _parse_cached(relevant)
    p = _parse(dict(relevant))  # large (or, by hand, non-string) values are not kept in the cache
    return p, canonical_json(p)


_CACHED_SIZE = 4096  # bytes of annotation values: the cache holds at most 4096 x 4 KiB


@functools.lru_cache(maxsize=4096)
def _parse_cached(relevant: tuple[tuple[str, Any], ...]) -> tuple[ev.Placement, str]:
    # Jobs of one team carry the same few annotation values; Placement is frozen, so sharing the
    # parsed value is safe. Errors are not cached (lru_cache does not keep exceptions).
    p = _parse(dict(relevant))
    return p, canonical_json(p)


def _parse(annotations: Mapping[str, Any]) -> ev.Placement:
    issues: list[PlacementIssue] = []
    fields: dict[str, Any] = {}
    for name in sorted(annotations):
        if name.startswith(PREFIX) and name not in KNOWN_ANNOTATIONS:
            issues.append(
                PlacementIssue(
                    annotation=name,
                    path="$",
                    found="an unknown kdispatch annotation",
                    accepted=", ".join(KNOWN_ANNOTATIONS),
                    hint=suggest(name, KNOWN_ANNOTATIONS),
                )
            )
    if PLACEMENT_ANNOTATION in annotations:
        r = _Reader(PLACEMENT_ANNOTATION, issues)
        with contextlib.suppress(_Invalid):
            fields.update(_canonical(r, annotations[PLACEMENT_ANNOTATION]))
    for field_name in FIELDS:
        attr, read = _FIELD_READERS[field_name]
        seen: dict[str, Any] = {}
        for name in (PREFIX + field_name, ALIAS_PREFIX + field_name):
            if name not in annotations or (name.startswith(ALIAS_PREFIX) and field_name not in ALIASED_FIELDS):
                continue
            r = _Reader(name, issues)
            try:
                raw = annotations[name]
                seen[name] = read(r, r.string(raw, "$") if not isinstance(raw, str) else raw.strip(), path="$")
            except _Invalid:
                continue
        if len(seen) == 2 and len({_json_encoder.encode(v) for v in seen.values()}) == 2:
            a, b = seen
            issues.append(
                PlacementIssue(
                    annotation=b,
                    path="$",
                    found="a value different from " + a,
                    accepted=f"the same placement in both, or only one of {a} and {b}",
                )
            )
        if seen:
            fields[attr] = next(iter(seen.values()))
    if issues:
        raise PlacementError(issues)
    return ev.Placement(**fields)


# ---- canonical form -----------------------------------------------------------------------------


def _term_dict(term: ev.SelectorTerm) -> dict[str, Any]:
    return {
        "matchExpressions": [{"key": e.key, "operator": e.operator, "values": list(e.values)} for e in term.match_expressions]
    }


def canonical_dict(p: ev.Placement) -> dict[str, Any]:
    return {
        "clusterAffinity": {
            "preferred": [{"preference": _term_dict(w.term), "weight": w.weight} for w in p.cluster_affinity.preferred],
            "required": [_term_dict(t) for t in p.cluster_affinity.required],
        },
        "clusterNames": list(p.cluster_names),
        "clusterSelector": dict(p.cluster_selector),
        "clusterTolerations": [
            {"effect": t.effect, "key": t.key, "operator": t.operator, "tolerationSeconds": t.toleration_seconds, "value": t.value}
            for t in p.cluster_tolerations
        ],
        "dispatchMode": p.dispatch_mode,
        "nominate": p.nominate,
        "preemptionPolicy": p.preemption_policy,
        "profile": p.profile,
    }


def canonical_json(p: ev.Placement) -> str:
    """The ``kdispatch.io/placement`` annotation value: sorted keys, defaults filled."""
    return _json_encoder.encode(canonical_dict(p)).decode()


# ---- the simulated-runtime hint ------------------------------------------------------------------

MAX_RUNTIME_MS = 365 * 24 * 3_600_000


def parse_runtime_ms(annotations: Mapping[str, Any]) -> int | None:
    """``kdispatch.io/simulated-runtime``: a Go-style duration (``30s``, ``1h30m``, ``250ms``) or ms."""
    return _duration_annotation(annotations, RUNTIME_ANNOTATION)


def parse_expected_duration_ms(annotations: Mapping[str, Any]) -> int | None:
    """``kdispatch.io/expected-duration``: the user's guess of the run time, for start-time
    forecasts (read back by the reconciler from the manifest); refused here when unreadable."""
    return _duration_annotation(annotations, EXPECTED_DURATION_ANNOTATION)


def _duration_annotation(annotations: Mapping[str, Any], name: str) -> int | None:
    raw = annotations.get(name)
    if raw is None:
        return None
    hint = ""
    if isinstance(raw, str):
        try:
            total = parse_duration_ms(raw)
        except DurationError as err:
            hint = "" if err.suggestion is None else _show(err.suggestion)
        else:
            if total <= MAX_RUNTIME_MS:
                return total
    issue = PlacementIssue(
        annotation=name, path="$", found=_show(raw), accepted="a duration up to a year, e.g. 30s, 5m, 1h30m, 250ms", hint=hint
    )
    raise PlacementError([issue])
