"""Quoting what a client sent in a message: enough to recognise it, never all of it."""

from __future__ import annotations


def short(value: object, *, limit: int = 60) -> str:
    """``repr`` cut to ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
