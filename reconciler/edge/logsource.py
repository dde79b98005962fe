"""Where the read-only commands (log, replay, explain) read the log from.

In order: ``--file`` (a JSONL export), ``--nats URL`` (or the config file's ``nats.url``), else
the embedded nats-server on ``--data-dir`` (default ``.kdispatch``), started for the command
and stopped after it.
"""

from __future__ import annotations

import argparse
import functools
import os
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from eventlog.codec import DecodeError
from eventlog.store import LogReader, SnapshotStore
from reconciler.config import ConfigError, load_config
from reconciler.edge.natsopts import connect_options


def add_source_arguments(parser: argparse.ArgumentParser, *, file: bool = True) -> None:
    group = parser.add_argument_group("where the log is")
    group.add_argument("--nats", metavar="URL", help="NATS server URL (default: the config's, else embedded)")
    group.add_argument(
        "--data-dir", metavar="DIR", help="data dir of the embedded nats-server (default: .kdispatch)"
    )
    group.add_argument("--config", metavar="FILE", help="kdispatch config file (for nats.url, dataDir)")
    group.add_argument(
        "--root", default="kd", metavar="NAME", help="which log on that server (subject root; default: kd)"
    )
    if file:
        group.add_argument("--file", metavar="JSONL", help="read a JSONL export instead of NATS")


@dataclass
class Source:
    reader: LogReader
    snapshots: SnapshotStore | None
    description: str


@asynccontextmanager
async def open_source(args: argparse.Namespace) -> AsyncIterator[Source]:
    path = getattr(args, "file", None)
    if path:
        from eventlog.jsonl import JsonlLog

        yield Source(reader=JsonlLog(path), snapshots=None, description=f"file {path}")
        return
    from eventlog.jetstream import connect

    config = load_config(args.config) if getattr(args, "config", None) else None
    url = args.nats or (config.nats.url if config else None)
    data_dir = args.data_dir or (config.data_dir if config else ".kdispatch")
    if url is None:
        url = running_server(data_dir)
    kwargs: dict[str, Any] = {"data_dir": data_dir, "root": args.root, "name": "kdispatch-cli"}
    if config is not None:
        kwargs.update(connect_options(config.nats))
    jlog = await connect(url, **kwargs)
    try:
        where = url or f"embedded nats-server on {data_dir}"
        yield Source(reader=jlog.reader, snapshots=jlog.snapshots, description=where)
    finally:
        await jlog.close()


RunAsync = Callable[[argparse.Namespace], Awaitable[int]]


def friendly_errors(command: str) -> Callable[[RunAsync], RunAsync]:
    """Turn the errors a user can fix (NATS unreachable, a bad file, a bad config) into one line
    on stderr and exit code 1, instead of a traceback."""

    def wrap(run: RunAsync) -> RunAsync:
        @functools.wraps(run)
        async def wrapped(args: argparse.Namespace) -> int:
            try:
                return await run(args)
            except BrokenPipeError:  # `kdispatch log | head`: the reader has seen enough
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                return 0
            except (ConnectionError, OSError, TimeoutError, ConfigError, DecodeError) as err:
                print(f"kdispatch {command}: {err or type(err).__name__}", file=sys.stderr)
                return 1

        return wrapped

    return wrap


URL_FILE = "nats.url"


def running_server(data_dir: str | Path) -> str | None:
    """The URL of the embedded nats-server a running ``kdispatch serve`` started on ``data_dir``.

    Two servers cannot share one JetStream store, so while ``serve`` runs, the read-only
    commands connect to its server instead of starting their own. A stale file (``serve`` was
    killed) is ignored.
    """
    path = Path(data_dir) / URL_FILE
    try:
        url = path.read_text().strip()
    except OSError:
        return None
    parsed = urlparse(url)
    try:
        with socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 4222), timeout=0.5):
            return url
    except OSError:
        return None


def parse_until(text: str) -> tuple[int | None, int | None]:
    """``--until``: a log sequence (``1234``) or a time (ISO 8601, ``Z`` or offset; naive = UTC).

    Returns ``(until_seq, until_ms)``.
    """
    text = text.strip()
    if text.isdigit():
        return int(text), None
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"--until {text!r}: give a log sequence (e.g. 1234) or a time (e.g. 2026-11-22T00:10:00Z)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return None, int(when.timestamp() * 1000)


def format_ms(at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
