"""What every kind shares: the pod set type, its errors, reading untrusted JSON, and the per-pod
request rule (KINDS.md, "Per-pod request rule").

Mutating admission runs before the API server validates the object, so nothing here trusts the
shape of what it reads: a field of the wrong type raises ``PodSetError`` with its JSON path, which
the webhook turns into a denial a person can act on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from eventlog import events as ev
from webhook.quantity import QuantityError, parse_nanos, to_integer
from webhook.quote import short

Amounts = dict[str, int]  # nano-units


class PodSetError(ValueError):
    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(f"{path}: {message}")
        self.message = message
        self.path = path


class NotDispatchable(ValueError):
    """A supported kind in a form kdispatch cannot move to another cluster (allowed, left alone)."""


@dataclass(frozen=True, kw_only=True)
class PodSetSpec:
    name: str
    count: int
    spec: dict[str, Any]  # the pod spec
    path: str  # JSON path of ``spec`` in the object, for messages
    min_count: int | None = None
    sidecars: bool = True  # restartPolicy Always on init containers makes them sidecars
    pod_level: bool = True  # pod-level resources (spec.resources) apply


def obj_at(parent: dict[str, Any], key: str, *, path: str) -> dict[str, Any]:
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PodSetError(f"expected an object, found {type(value).__name__}", path=f"{path}.{key}")
    return value


def list_at(parent: dict[str, Any], key: str, *, path: str) -> list[Any]:
    value = parent.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise PodSetError(f"expected a list, found {type(value).__name__}", path=f"{path}.{key}")
    return value


def int_at(parent: dict[str, Any], key: str, *, path: str, default: int | None) -> int | None:
    value = parent.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PodSetError(f"expected a non-negative integer, found {short(value)}", path=f"{path}.{key}")
    return value


def str_at(parent: dict[str, Any], key: str, *, path: str, default: str = "") -> str:
    value = parent.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise PodSetError(f"expected a string, found {short(value)}", path=f"{path}.{key}")
    return value


def items(values: list[Any], path: str) -> Iterable[tuple[dict[str, Any], str]]:
    for i, item in enumerate(values):
        if not isinstance(item, dict):
            raise PodSetError(f"expected an object, found {type(item).__name__}", path=f"{path}[{i}]")
        yield item, f"{path}[{i}]"


def pod_spec(template: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    return obj_at(template, "spec", path=path), f"{path}.spec"


def add(a: Amounts, b: Amounts) -> Amounts:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


def max_of(a: Amounts, b: Amounts) -> Amounts:
    out = dict(a)
    for k, v in b.items():
        out[k] = max(out[k], v) if k in out else v
    return out


def amounts(raw: dict[str, Any], path: str) -> Amounts:
    out: Amounts = {}
    for name, value in raw.items():
        try:
            out[name] = parse_nanos(value)
        except QuantityError as err:
            raise PodSetError(str(err), path=f"{path}.{name}") from None
    return out


def requests_of(holder: dict[str, Any], path: str) -> Amounts:
    """requests, with limits standing in for missing keys (Kueue's template adjustment)."""
    resources = obj_at(holder, "resources", path=path)
    rpath = f"{path}.resources"
    requests = amounts(obj_at(resources, "requests", path=rpath), f"{rpath}.requests")
    for name, value in amounts(obj_at(resources, "limits", path=rpath), f"{rpath}.limits").items():
        requests.setdefault(name, value)
    return requests


def _pod_level_key(name: str) -> bool:
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def pod_requests(
    spec: dict[str, Any], *, path: str, sidecars: bool = True, pod_level: bool = True
) -> Amounts:
    """component-helpers ``PodRequests`` after Kueue's adjustments, exact."""
    try:
        return _pod_requests_unchecked(spec, sidecars=sidecars, pod_level=pod_level)
    except _Malformed:  # the careful reading below says where and what
        return _pod_requests_checked(spec, path=path, sidecars=sidecars, pod_level=pod_level)


class _Malformed(Exception):
    pass


def _plain_requests(holder: Any) -> Amounts:
    """``requests_of`` without JSON paths (every admitted object pays for them otherwise)."""
    if not isinstance(holder, dict):
        raise _Malformed
    resources = holder.get("resources")
    if resources is None:
        return {}
    if not isinstance(resources, dict):
        raise _Malformed
    requests, limits = resources.get("requests"), resources.get("limits")
    if (requests is not None and not isinstance(requests, dict)) or (limits is not None and not isinstance(limits, dict)):
        raise _Malformed
    try:
        out = {name: parse_nanos(value) for name, value in requests.items()} if requests else {}
        for name, value in (limits or {}).items():
            nanos = parse_nanos(value)  # parsed even when shadowed, as requests_of does: a bad limit is denied
            out.setdefault(name, nanos)
    except QuantityError:
        raise _Malformed from None
    return out


def _plain_list(spec: dict[str, Any], key: str) -> list[Any]:
    values = spec.get(key)
    if values is None:
        return []
    if not isinstance(values, list):
        raise _Malformed
    return values


def _pod_requests_unchecked(spec: dict[str, Any], *, sidecars: bool, pod_level: bool) -> Amounts:
    """The same arithmetic as ``_pod_requests_checked``; raises ``_Malformed`` where it would raise."""
    total: Amounts = {}
    for c in _plain_list(spec, "containers"):
        total = add(total, _plain_requests(c))
    running_sidecars: Amounts = {}
    init_max: Amounts = {}
    for ic in _plain_list(spec, "initContainers"):
        req = _plain_requests(ic)
        if sidecars and ic.get("restartPolicy") == "Always":
            total = add(total, req)
            running_sidecars = add(running_sidecars, req)
            use = running_sidecars
        else:
            use = add(req, running_sidecars)
        init_max = max_of(init_max, use)
    total = max_of(total, init_max)
    if pod_level:
        for name, value in _plain_requests(spec).items():
            if _pod_level_key(name):
                total[name] = value
    overhead = spec.get("overhead")
    if overhead is None:
        return total
    if not isinstance(overhead, dict):
        raise _Malformed
    try:
        return add(total, {name: parse_nanos(value) for name, value in overhead.items()})
    except QuantityError:
        raise _Malformed from None


def _pod_requests_checked(
    spec: dict[str, Any], *, path: str, sidecars: bool = True, pod_level: bool = True
) -> Amounts:
    total: Amounts = {}
    for c, cpath in items(list_at(spec, "containers", path=path), f"{path}.containers"):
        total = add(total, requests_of(c, cpath))
    running_sidecars: Amounts = {}
    init_max: Amounts = {}
    for ic, ipath in items(list_at(spec, "initContainers", path=path), f"{path}.initContainers"):
        req = requests_of(ic, ipath)
        if sidecars and ic.get("restartPolicy") == "Always":
            total = add(total, req)
            running_sidecars = add(running_sidecars, req)
            use = running_sidecars
        else:
            use = add(req, running_sidecars)
        init_max = max_of(init_max, use)
    total = max_of(total, init_max)
    if pod_level:
        for name, value in requests_of(spec, path).items():
            if _pod_level_key(name):
                total[name] = value
    return add(total, amounts(obj_at(spec, "overhead", path=path), f"{path}.overhead"))


def to_integers(amounts: Amounts) -> ev.Resources:
    return {name: to_integer(name, amounts[name]) for name in sorted(amounts)}


def annotations_of(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("annotations"), dict):
        return meta["annotations"]
    return {}


