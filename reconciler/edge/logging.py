"""structlog configuration shared by the reconciler processes: one JSON object per line.

Every line carries the process role and replica and, where known, the ``job`` (``ns/name``) and
``cluster`` it is about (``event_context``), so a person can ``grep '"job":"team-a/train-1"'``
across serve, actuator and observer output. Context bound with structlog's contextvars is merged
in, so async tasks keep theirs.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

from eventlog import events as ev

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure(*, level: str = "info", json: bool = True, stream: TextIO | None = None, **static: Any) -> None:
    """Configure structlog for this process. ``static`` fields (e.g. ``role="serve"``) go on every line."""
    renderer: Any = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if static:
        processors.append(_static_fields(static))
    processors += [structlog.processors.format_exc_info, renderer]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stderr),
        cache_logger_on_first_use=False,
    )


def _static_fields(fields: dict[str, Any]) -> Any:
    def add(_logger: Any, _name: str, event_dict: dict[str, Any]) -> dict[str, Any]:
        for key, value in fields.items():
            event_dict.setdefault(key, value)
        return event_dict

    return add


def get_logger(name: str) -> Any:
    return structlog.get_logger(name)


def event_context(event: ev.Event) -> dict[str, str]:
    """``job`` and ``cluster`` of an event, for log context (absent keys are simply left out)."""
    ctx: dict[str, str] = {"event": type(event).__name__}
    job = getattr(event, "job", None) or getattr(event, "preemptor", None)
    if isinstance(job, ev.JobRef):
        ctx["job"] = job.key
    cluster = getattr(event, "cluster", None)
    if isinstance(cluster, str):
        ctx["cluster"] = cluster
    return ctx
