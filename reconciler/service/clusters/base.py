"""The interface every worker cluster implements, and the facts' stable message ids.

A worker is driven by the actuator (``create``/``delete``/``evict``, all idempotent per
(job uid, attempt)) and observed by itself: ``run`` reports facts through a ``Reporter`` until
stopped. Requests that cannot reach the cluster raise ``Unreachable``; the actuator retries them
with back-off for as long as the log still wants them.
"""

from __future__ import annotations

import asyncio
from typing import Any, NamedTuple, Protocol

from msgspec import Struct, field

from eventlog.events import InputEvent, JobRef, PodSet


class Unreachable(RuntimeError):
    """The cluster did not answer (or refused us); try again later."""


class RemoteSpec(Struct, frozen=True, kw_only=True):
    """Everything needed to create the remote copy of one attempt of a job on one cluster."""

    job: JobRef
    cluster: str
    attempt: int
    pod_sets: list[PodSet] = field(default_factory=list)
    priority: int = 0
    runtime_ms: int | None = None
    queue: str | None = None
    manifest: dict[str, Any] | None = None


class CopyRef(NamedTuple):
    """One of our copies found on a worker (for garbage collection)."""

    job_uid: str
    attempt: int
    namespace: str
    name: str
    age_ms: int  # how long it has existed, as far as the worker can tell


class Reporter(Protocol):
    async def report(self, event: InputEvent, *, msg_id: str) -> None:
        """Publish a fact to the inbox (retrying until it is recorded or the process stops)."""
        ...


class Worker(Protocol):
    name: str

    async def create(self, spec: RemoteSpec) -> None: ...

    async def delete(self, job: JobRef, attempt: int) -> None: ...

    async def evict(self, job: JobRef, attempt: int, *, reason: str) -> None: ...

    async def copies(self) -> list[CopyRef]:
        """Our copies on the cluster (origin label = our manager id)."""
        ...

    async def run(self, reporter: Reporter, stop: asyncio.Event) -> None:
        """Observe the cluster and report facts until ``stop`` is set; never raises on outages."""
        ...


def fact_id(*, cluster: str, job_uid: str, attempt: int, fact: str) -> str:
    """The Nats-Msg-Id of a remote fact: a retry (or a second observer) is recorded once."""
    return f"{cluster}/{job_uid}/{attempt}/{fact}"


def fact_name(event: InputEvent) -> str:
    """``RemoteAdmitted`` -> ``admitted`` (the last part of a fact's message id)."""
    name = type(event).__name__
    return name.removeprefix("Remote").lower()


def remote_fact_id(event: InputEvent) -> str:
    """Message id for a Remote* fact (they all carry job, cluster and attempt)."""
    job: JobRef = event.job  # type: ignore[union-attr]
    cluster: str = event.cluster  # type: ignore[union-attr]
    attempt: int = event.attempt  # type: ignore[union-attr]
    return fact_id(cluster=cluster, job_uid=job.uid, attempt=attempt, fact=fact_name(event))


def log_context(event: InputEvent) -> dict[str, str]:
    """``fact``, ``job`` and ``cluster`` of a fact, for structured log lines."""
    ctx = {"fact": type(event).__name__}
    job = getattr(event, "job", None)
    if isinstance(job, JobRef):
        ctx["job"] = job.key
    cluster = getattr(event, "cluster", None)
    if isinstance(cluster, str):
        ctx["cluster"] = cluster
    return ctx
