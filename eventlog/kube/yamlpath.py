"""Where a JSON path (``$.spec.resourceGroups[0].flavors[1]``) is written in a YAML document.

Error messages name a line as well as the path; the config loader and the Kueue loader both ask
this. Mapping keys may hold dots (``nvidia.com/gpu``), so a key is matched against the rest of
the path, longest first.
"""

from __future__ import annotations

import re

import yaml

_INDEX = re.compile(r"\[(\d+)\]")


def _step(node: yaml.Node, rest: str) -> tuple[yaml.Node, int, str] | None:
    """One path element down: (the node, its line, what is left of the path), or None."""
    if rest.startswith("[") and isinstance(node, yaml.SequenceNode):
        m = _INDEX.match(rest)
        if m is None or int(m.group(1)) >= len(node.value):
            return None
        child = node.value[int(m.group(1))]
        return child, child.start_mark.line, rest[m.end() :]
    if rest.startswith(".") and isinstance(node, yaml.MappingNode):
        keys = [
            (k, v)
            for k, v in node.value
            if isinstance(k, yaml.ScalarNode)
            and rest[1:].startswith(k.value)
            and rest[1 + len(k.value) : 2 + len(k.value)] in ("", ".", "[")
        ]
        if not keys:
            return None
        key, child = max(keys, key=lambda kv: len(kv[0].value))
        return child, key.start_mark.line, rest[1 + len(key.value) :]
    return None


def line_at(node: yaml.Node, path: str, *, nearest: bool) -> int | None:
    """The 1-based line of ``path`` under ``node``. Where the path leaves the document: with
    ``nearest``, the line of the deepest part that is there (a missing field points at the object
    holding it); else None. msgspec's ``[...]`` ("some value of this mapping") is the mapping."""
    line: int = node.start_mark.line
    rest = path[1:] if path.startswith("$") else ""
    while rest:
        step = _step(node, rest)
        if step is None:
            if nearest or rest.startswith("[...]"):
                break
            return None
        node, line, rest = step
    return line + 1
