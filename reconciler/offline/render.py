"""One human line per log entry: ``seq  time  Type  job-or-cluster  key=value …``.

Only fields that differ from their defaults are shown; bulky ones (the admitted manifest) are
left out, pod sets and resources are summarised. The JSON form (``--json``) has everything.
"""

from __future__ import annotations

from typing import Any

import msgspec

from eventlog import events as ev
from reconciler.edge.logsource import format_ms

_HIDDEN = {"v", "manifest", "job", "raw"}


def subject_key(event: ev.Event) -> str:
    job = getattr(event, "job", None) or getattr(event, "preemptor", None)
    if isinstance(job, ev.JobRef):
        return job.key
    cluster = getattr(event, "cluster", None)
    return cluster if isinstance(cluster, str) else "-"


def concerns(event: ev.Event, key: str) -> bool:
    """Is the event about job ``key`` (``ns/name``): its job, its preemptor, or one of its victims?"""
    for attr in ("job", "preemptor"):
        ref = getattr(event, attr, None)
        if isinstance(ref, ev.JobRef) and ref.key == key:
            return True
    victims = getattr(event, "victims", None)
    return isinstance(victims, list) and any(v.key == key for v in victims)


def resources(res: dict[str, int]) -> str:
    parts = []
    for name, amount in sorted(res.items()):
        parts.append(f"{name}:{amount}m" if name == "cpu" else f"{name}:{_human_amount(name, amount)}")
    return "{" + ",".join(parts) + "}"


def _human_amount(name: str, amount: int) -> str:
    if name in {"memory", "ephemeral-storage"} and amount >= 1 << 20:
        for unit, size in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20)):
            if amount >= size and amount % size == 0:
                return f"{amount // size}{unit}"
    return str(amount)


def _term(term: ev.SelectorTerm) -> str:
    exprs = []
    for m in term.match_expressions:
        values = f" ({','.join(m.values)})" if m.values else ""
        exprs.append(f"{m.key} {m.operator}{values}")
    return " && ".join(exprs) or "*"


def placement(p: ev.Placement) -> str:
    """The placement spec as a person writes it: only what differs from the defaults."""
    default = ev.Placement()
    parts: list[str] = []
    if p.cluster_selector:
        parts.append("selector={" + ",".join(f"{k}={v}" for k, v in sorted(p.cluster_selector.items())) + "}")
    if p.cluster_affinity.required:
        parts.append("affinity=(" + " || ".join(_term(t) for t in p.cluster_affinity.required) + ")")
    for w in p.cluster_affinity.preferred:
        parts.append(f"prefer={w.weight}:({_term(w.term)})")
    if p.cluster_tolerations:
        tols = []
        for t in p.cluster_tolerations:
            what = t.key + (f"={t.value}" if t.operator == "Equal" and t.value else "") if t.key else "*"
            tols.append(what + (":Exists" if t.operator == "Exists" else "") + (f":{t.effect}" if t.effect else ""))
        parts.append("tolerates=[" + ",".join(tols) + "]")
    if p.cluster_names:
        parts.append("pin=[" + ",".join(p.cluster_names) + "]")
    for name in ("dispatch_mode", "profile", "nominate", "preemption_policy"):
        if getattr(p, name) != getattr(default, name):
            parts.append(f"{name}={getattr(p, name)}")
    return " ".join(parts)


def _value(name: str, value: Any) -> str:
    if isinstance(value, ev.JobRef):
        return value.key
    if isinstance(value, ev.Placement):
        return placement(value)
    if name == "pod_sets":
        return "[" + " ".join(f"{p.name}:{p.count}x{resources(p.requests)}" for p in value) + "]"
    if name in {"capacity", "usage", "claim"} and isinstance(value, dict):
        return resources(value)
    if name == "victims":
        return "[" + ",".join(v.key for v in value) + "]"
    if name == "profiles":
        return "[" + ",".join(p.name for p in value) + "]"
    if name == "plugins" and isinstance(value, list):  # PolicyLoaded: third-party ones matter
        builtin = sum(1 for r in value if r.builtin)
        named = [f"{r.name}({r.distribution}=={r.version})" for r in value if not r.builtin]
        return "[" + ",".join([*named, f"{builtin} built-in"] if builtin else named) + "]"
    if name.endswith("_ms") and isinstance(value, int) and value > 1_000_000_000_000:
        return format_ms(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "[" + ",".join(value) + "]"
    if isinstance(value, dict) and all(isinstance(v, str | int) for v in value.values()):
        return "{" + ",".join(f"{k}={v}" for k, v in value.items()) + "}"
    if isinstance(value, str) and (" " in value or value == ""):
        return repr(value)
    if isinstance(value, msgspec.Struct | list | dict):
        return msgspec.json.encode(msgspec.to_builtins(value)).decode()
    return str(value)


def describe(event: ev.Event) -> str:
    """``key=value`` pairs of the fields that matter (non-default, not the subject itself)."""
    key = subject_key(event)
    parts: list[str] = []
    for f in msgspec.structs.fields(event):
        if f.name in _HIDDEN:
            continue
        value = getattr(event, f.name)
        if f.name == "cluster" and value == key:
            continue
        if f.name == "preemptor" and isinstance(value, ev.JobRef) and value.key == key:
            continue
        if f.default is not msgspec.NODEFAULT and value == f.default:
            continue
        if f.default_factory is not msgspec.NODEFAULT and value == f.default_factory():
            continue
        parts.append(_value(f.name, value) if f.name == "placement" else f"{f.name}={_value(f.name, value)}")
    return " ".join(parts)


def line(entry: ev.LogEntry) -> str:
    event = entry.event
    kind = type(event).__name__
    extra = ""
    if entry.batch is not None and entry.batch[1] > 1:
        extra = f" [{entry.batch[0] + 1}/{entry.batch[1]}]"
    text = f"{entry.seq:>8}  {format_ms(entry.at_ms)}  {kind:<17} {subject_key(event):<28} {describe(event)}"
    return (text + extra).rstrip()
