"""Waiting in tests for something to happen: the one helper, in an async and a blocking variant.

``await eventually(check, what="...")`` calls ``check`` (a plain function or a coroutine
function) until it returns something truthy, and returns that. The timeout bounds how long a
broken build makes the suite wait; it is not a timing assertion, so it is generous. When it runs
out, the failure names what was awaited and the last value (or error) ``check`` gave, which is
usually the first thing a person needs to see.

``check`` may raise to give up early (e.g. ``AssertionError`` when the process it waits on has
exited): only the exception types listed in ``ignoring`` mean "not yet".

Waiting for something *not* to happen is not done with these: wait instead for a later event that
proves the component has handled the input past the point where it would have acted, then
assert that it did not act (see tests/reconciler/clusters/test_kube_manager.py).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable
from typing import Any

DEFAULT_TIMEOUT_S = 10.0


async def eventually(
    check: Callable[[], Any],
    *,
    what: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    interval_s: float = 0.05,
    ignoring: tuple[type[BaseException], ...] = (),
) -> Any:
    """Poll ``check()`` (awaited if it returns an awaitable) until it is truthy; return it."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    last: _Last = _Last()
    while True:
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
            last.value(result)
            if result:
                return result
        except ignoring as err:
            last.error(err)
        if loop.time() > end:
            raise AssertionError(last.message(what, timeout_s))
        await asyncio.sleep(interval_s)


def eventually_blocking(
    check: Callable[[], Any],
    *,
    what: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    interval_s: float = 0.1,
    ignoring: tuple[type[BaseException], ...] = (),
) -> Any:
    """``eventually`` for synchronous tests and helpers (blocks the thread between checks)."""
    end = time.monotonic() + timeout_s
    last: _Last = _Last()
    while True:
        try:
            result = check()
            last.value(result)
            if result:
                return result
        except ignoring as err:
            last.error(err)
        if time.monotonic() > end:
            raise AssertionError(last.message(what, timeout_s))
        time.sleep(interval_s)


class Unmet:
    """A falsy check result that shows what the check saw, for the failure message: e.g.
    ``return entries if done(entries) else Unmet(f"{len(entries)} entries")``."""

    def __init__(self, seen: Any) -> None:
        self.seen = seen

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return self.seen if isinstance(self.seen, str) else repr(self.seen)


class _Last:
    """What the check said last: a value, or an error it was allowed to raise."""

    def __init__(self) -> None:
        self.seen = "nothing (the check never returned)"

    def value(self, result: Any) -> None:
        self.seen = _short(repr(result))

    def error(self, err: BaseException) -> None:
        self.seen = f"{type(err).__name__}: {_short(str(err))}"

    def message(self, what: str, timeout_s: float) -> str:
        return f"waited {timeout_s:g}s for {what}; last seen: {self.seen}"


def _short(text: str, limit: int = 800) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"
