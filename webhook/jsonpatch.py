"""The small part of RFC 6902 JSONPatch the webhook writes (``add`` to object members and to the
end of a list), plus an applier so tests and tools can see the patched object."""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping, Sequence
from typing import Any

Op = dict[str, Any]


def escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def pointer(path: Sequence[str]) -> str:
    return _pointer(tuple(path))


@functools.lru_cache(maxsize=256)
def _pointer(path: tuple[str, ...]) -> str:
    # The webhook patches the same few paths of each kind over and over.
    return "".join("/" + escape(p) for p in path)


def set_value(obj: dict[str, Any], path: Sequence[str], *, value: Any) -> list[Op]:
    """Ops that make ``obj[path] == value``, creating missing parents as one nested ``add``."""
    node = obj  # a dict all the way down: a parent that is not one is replaced
    for depth in range(len(path) - 1):
        child = node.get(path[depth])
        if not isinstance(child, dict):
            nested: Any = value
            for inner in reversed(path[depth + 1 :]):
                nested = {inner: nested}
            return [{"op": "add", "path": pointer(path[: depth + 1]), "value": nested}]
        node = child
    return members(node, path[:-1], {path[-1]: value})


def members(node: dict[str, Any], path: Sequence[str], values: Mapping[str, Any]) -> list[Op]:
    """Ops that make each ``node[key] == value``, where ``node`` is the object at ``path``."""
    return [
        {"op": "add", "path": pointer((*path, key)), "value": value}
        for key, value in values.items()
        if key not in node or node[key] != value
    ]


def apply(obj: dict[str, Any], ops: Sequence[Op]) -> dict[str, Any]:
    """A patched deep copy of ``obj`` (``add`` and ``replace`` only)."""
    out = copy.deepcopy(obj)
    for op in ops:
        if op["op"] not in ("add", "replace"):
            raise ValueError(f"unsupported op {op['op']!r}")
        tokens = [unescape(t) for t in op["path"].split("/")[1:]]
        node: Any = out
        for token in tokens[:-1]:
            node = node[int(token)] if isinstance(node, list) else node[token]
        last = tokens[-1]
        value = copy.deepcopy(op["value"])
        if isinstance(node, list):
            if last == "-":
                node.append(value)
            else:
                node.insert(int(last), value)
        else:
            if op["op"] == "replace" and last not in node:
                raise KeyError(op["path"])
            node[last] = value
    return out
