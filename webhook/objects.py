"""Typed views of the Kubernetes objects the webhook reads, decoded from the review's JSON.

The review's ``object`` stays the JSON it was sent as (the JSONPatch is computed against it and
the recorded manifest is all of it); the parts kdispatch reads are converted from it into the
msgspec Structs of this module and of ``webhook.podsets``, once per review. Unknown fields are
skipped (a Kubernetes object has many fields kdispatch never reads); a field of the wrong type is
rejected with its JSON path and the value found, in the words a person would use ("expected a
non-negative integer, found 'two'"), because mutating admission runs before the API server has
validated anything.

``null`` is read as absent, as the API server's own decoding does: every field is optional.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, TypeVar

import msgspec
from msgspec import Meta, Struct

from webhook.quote import short

T = TypeVar("T")

Count = Annotated[int, Meta(ge=0)]
"""Replicas, parallelism, completions and the like."""


class ObjectError(ValueError):
    """A field of the wrong type: ``path`` is its JSON path in the object."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(f"{path}: {message}")
        self.message = message
        self.path = path


class OwnerReference(Struct, frozen=True, rename="camel"):
    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None


class ObjectMeta(Struct, frozen=True, rename="camel"):
    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    owner_references: list[OwnerReference] | None = None

    @property
    def label_map(self) -> dict[str, str]:
        return self.labels or {}

    @property
    def annotation_map(self) -> dict[str, str]:
        return self.annotations or {}


_EMPTY_META = ObjectMeta()

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def member(path: str, key: str) -> str:
    """``path.key``, or ``path['key']`` for a key a reader could not split from the path
    (``nvidia.com/gpu``, an annotation)."""
    return f"{path}.{key}" if _PLAIN_KEY.fullmatch(key) else f"{path}[{key!r}]"


def metadata(obj: dict[str, Any]) -> ObjectMeta:
    """``obj.metadata`` (``obj`` is a JSON object); raises ``ObjectError``."""
    raw = obj.get("metadata")
    return _EMPTY_META if raw is None else convert(raw, ObjectMeta, path="$.metadata")


def convert(value: Any, into: type[T], *, path: str = "$", error: type[ObjectError] = ObjectError) -> T:
    """``value`` (JSON, as decoded) as ``into``; ``path`` is where ``value`` is in the object."""
    try:
        return msgspec.convert(value, into, strict=True)
    except msgspec.ValidationError as err:
        message, where = _split(str(err))
        found, full = _found(value, where, prefix=path)
        raise error(_explain(message, found), path=full) from None


_EXPECTED = re.compile(r"Expected `(?P<types>[^`]*)`(?:, got `[^`]*`| (?P<bound>[<>]=? ?-?\d+))?$")
_WORDS = {
    "int": "a non-negative integer",
    "str": "a string",
    "bool": "true or false",
    "object": "an object",
    "array": "a list",
    "float": "a number",
}


def _split(text: str) -> tuple[str, str]:
    marker = " - at `"
    if marker in text:
        message, where = text.rsplit(marker, 1)
        return message, where.rstrip("`")
    return text, "$"


def _explain(message: str, found: Any) -> str:
    match = _EXPECTED.match(message)
    if match is None:
        return message[:1].lower() + message[1:]
    kinds = [t for t in match["types"].split(" | ") if t != "null"]
    expected = " or ".join(_WORDS.get(t, t) for t in kinds)
    shown = type(found).__name__ if isinstance(found, (dict, list)) else short(found)
    return f"expected {expected}, found {shown}"


_STEP = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")


def _found(value: Any, where: str, *, prefix: str) -> tuple[Any, str]:
    """The value at msgspec's path ``where`` and its full JSON path. msgspec writes a map's key as
    ``[...]``; the key named is the first whose value is not a string, the only map values the
    Structs here type (labels, annotations)."""
    node, path = value, prefix
    for match in _STEP.finditer(where):
        name, index = match.groups()
        if name is not None and isinstance(node, dict):
            node, path = node.get(name), member(path, name)
        elif index == "..." and isinstance(node, dict):
            key = next((k for k, v in node.items() if not isinstance(v, str)), None)
            node, path = node.get(key), member(path, str(key))
        elif index is not None and index != "..." and isinstance(node, list) and int(index) < len(node):
            node, path = node[int(index)], f"{path}[{index}]"
        else:
            return None, prefix + where[1:]
    return node, path
