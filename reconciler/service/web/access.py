"""Who may read what on the API and the page (``web.authorization: kubernetes``).

The request's bearer token is given to the manager's TokenReview (authentication.k8s.io/v1): the
answer is a user and groups, or "not authenticated". For each namespace a response would show, a
SubjectAccessReview (authorization.k8s.io/v1) asks whether that user may ``list`` Jobs (batch) in
it: a namespace's job names, phases and reasons are shown only to someone who could list its Jobs
with kubectl. Both answers are kept for ``ttl_s`` (a revoked token or role binding is honoured
within that time), so a page polling every 2 s costs the API server a few reviews per ``ttl_s``,
not a few per request.

A token is kept only as its SHA-256 digest (the cache key), never logged.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

K = TypeVar("K")
V = TypeVar("V")

# One verdict per namespace: may list Jobs there. A detail page needs nothing more than the list
# shows (the same rows), so `get` is not asked separately.
RESOURCE = {"group": "batch", "resource": "jobs", "verb": "list"}
# The cache is cleared when it grows past this (many distinct tokens): a bound on memory, not
# an eviction policy worth more.
MAX_ENTRIES = 10_000
# Reviews in flight at once for one request (a board with many namespaces).
PARALLEL_REVIEWS = 16


class Reviews(Protocol):
    """The one call needed of the manager API (``clusters.api.KubeApi.review``)."""

    async def review(self, group: str, version: str, plural: str, body: dict[str, Any]) -> dict[str, Any]: ...


@dataclass(frozen=True)
class User:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


class ReviewFailed(RuntimeError):
    """The manager API did not answer a review: the caller answers 503, never "allowed"."""


class KubeAccess:
    def __init__(self, api: Reviews, *, ttl_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.api = api
        self.ttl_s = ttl_s
        self.clock = clock
        self._users: dict[str, tuple[float, User | None]] = {}
        self._verdicts: dict[tuple[User, str], tuple[float, bool]] = {}
        self.reviews = 0  # reviews sent (the cache's effect, for tests and metrics)

    async def user(self, token: str) -> User | None:
        """The token's user, or None when the API server does not authenticate it."""
        digest = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        hit = self._users.get(digest)
        if hit is not None and hit[0] > now:
            return hit[1]
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        status = (await self._review("authentication.k8s.io", "tokenreviews", body)).get("status") or {}
        user = _user(status) if status.get("authenticated") else None
        _bounded(self._users)[digest] = (now + self.ttl_s, user)
        return user

    async def readable(self, user: User, namespaces: Iterable[str]) -> set[str]:
        """The namespaces, of those given, whose Jobs ``user`` may list."""
        wanted = sorted(set(namespaces))
        gate = asyncio.Semaphore(PARALLEL_REVIEWS)

        async def one(ns: str) -> bool:
            async with gate:
                return await self.may_read(user, ns)

        verdicts = await asyncio.gather(*(one(ns) for ns in wanted))
        return {ns for ns, ok in zip(wanted, verdicts, strict=True) if ok}

    async def may_read(self, user: User, namespace: str) -> bool:
        now = self.clock()
        hit = self._verdicts.get((user, namespace))
        if hit is not None and hit[0] > now:
            return hit[1]
        spec: dict[str, Any] = {
            "user": user.name,
            "groups": list(user.groups),
            "resourceAttributes": {"namespace": namespace, **RESOURCE},
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra}
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        status = (await self._review("authorization.k8s.io", "subjectaccessreviews", body)).get("status") or {}
        allowed = bool(status.get("allowed")) and not status.get("denied")
        _bounded(self._verdicts)[(user, namespace)] = (now + self.ttl_s, allowed)
        return allowed

    async def _review(self, group: str, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        self.reviews += 1
        try:
            return await self.api.review(group, "v1", plural, body)
        except Exception as err:  # Unreachable, ApiError, or anything else: never a silent allow
            raise ReviewFailed(f"cannot check access: {group} {plural}: {err}") from None


def _user(status: dict[str, Any]) -> User:
    info = status.get("user") or {}
    extra = info.get("extra") or {}
    return User(
        name=str(info.get("username") or ""),
        uid=str(info.get("uid") or ""),
        groups=tuple(str(g) for g in info.get("groups") or ()),
        extra=tuple(sorted((str(k), tuple(str(x) for x in v or ())) for k, v in extra.items())),
    )


def _bounded(cache: dict[K, V]) -> dict[K, V]:
    if len(cache) >= MAX_ENTRIES:
        cache.clear()
    return cache


def bearer(header: str | None) -> str | None:
    """The token of ``Authorization: Bearer TOKEN`` (scheme case-insensitive), else None."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None
