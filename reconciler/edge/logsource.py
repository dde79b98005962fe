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
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

# Only what building the parser needs is imported here: ``kdispatch log --help`` must not load
# NATS, structlog or the config loader (see tests/reconciler/shell/test_cli_startup.py).
if TYPE_CHECKING:
    from eventlog.store import LogReader, SnapshotStore


class SourceError(Exception):
    """The log to read is not there: a path that does not exist, a dir without a log store, an
    unknown root. Reading verbs never create what they were asked to read."""


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
    """The log the arguments name, opened for reading; ``SourceError`` if it is not there."""
    path = getattr(args, "file", None)
    if path:
        from eventlog.jsonl import JsonlLog

        _check_file(Path(path))
        yield Source(reader=JsonlLog(path), snapshots=None, description=f"file {path}")
        return
    from eventlog.embedded import EmbeddedNats
    from eventlog.jetstream import connect
    from eventlog.natsauth import Credentials, inbox_prefix
    from reconciler.config import load_config
    from reconciler.edge.natsopts import connect_options

    config = load_config(args.config) if getattr(args, "config", None) else None
    url = args.nats or (config.nats.url if config else None)
    data_dir = args.data_dir or (config.data_dir if config else ".kdispatch")
    options: dict[str, Any] = connect_options(config.nats) if config is not None else {}
    embedded: EmbeddedNats | None = None
    if url is None:
        url = running_server(data_dir)
        options.update(_reader_identity(Path(data_dir), options))
    where = url or f"embedded nats-server on {data_dir}"
    if url is None:
        _check_data_dir(Path(data_dir))
        auth = Credentials(data_dir)
        # The store of `serve`'s embedded server: started again with its authorization, read as
        # the reader user; a store without credentials (the demo's) as before.
        conf = auth.server_conf if auth.server_conf.is_file() else None
        embedded = await EmbeddedNats(data_dir=data_dir, config_file=conf).start_async()
        if embedded.recovered:
            print(f"kdispatch: {embedded.recovered}", file=sys.stderr)
        url = embedded.url
    try:
        await _check_log_exists(url, root=args.root, where=where, options=options)
        jlog = await connect(
            url,
            root=args.root,
            name="kdispatch-cli",
            create_streams=False,
            inbox_prefix=inbox_prefix("reader"),
            **options,
        )
        try:
            yield Source(reader=jlog.reader, snapshots=jlog.snapshots, description=where)
        finally:
            await jlog.close()
    finally:
        if embedded is not None:
            await embedded.stop_async()


def _reader_identity(data_dir: Path, options: dict[str, Any]) -> dict[str, Any]:
    """The read-only user of `serve`'s embedded server (``<data dir>/nats-auth/reader.nk``),
    unless the config names an identity."""
    from eventlog.natsauth import Credentials

    seed = Credentials(data_dir).seed_file("reader")
    if "creds" in options or "nkey" in options or not seed.is_file():
        return {}
    return {"nkey": seed}


def _check_file(path: Path) -> None:
    if not path.exists():
        raise SourceError(f"--file {path}: no such file (make one with `kdispatch log --json > FILE`)")
    if not path.is_file():
        raise SourceError(f"--file {path}: not a file (give a JSONL export, e.g. from `kdispatch log --json`)")


def _check_data_dir(data_dir: Path) -> None:
    if not data_dir.exists():
        raise SourceError(
            f"--data-dir {data_dir}: no such directory (a log is written there by `kdispatch serve` "
            "or `kdispatch demo`; for a server elsewhere give --nats URL)"
        )
    if not data_dir.is_dir():
        raise SourceError(f"--data-dir {data_dir}: not a directory")
    if not (data_dir / "jetstream").is_dir():
        raise SourceError(
            f"--data-dir {data_dir}: no log store in it (no {data_dir / 'jetstream'}); "
            "is it the data dir of `kdispatch serve` or `kdispatch demo`?"
        )


async def _check_log_exists(url: str, *, root: str, where: str, options: dict[str, Any]) -> None:
    """Opening the log creates its streams when they are missing; a reader must not, so look first."""
    from nats.js.errors import NotFoundError

    from eventlog.jetstream.connection import open_client
    from eventlog.jetstream.names import LogNames
    from eventlog.natsauth import inbox_prefix

    names = LogNames(root)
    nc = await open_client(
        url,
        creds=options.get("creds"),
        nkey=options.get("nkey"),
        tls=options.get("tls"),
        name="kdispatch-cli",
        timeout_s=10.0,
        inbox_prefix=inbox_prefix("reader"),
    )
    try:
        js = nc.jetstream(timeout=10.0)
        try:
            await js.stream_info(names.log_stream)
        except NotFoundError:
            roots = [
                s.config.name[: -len("_LOG")].lower()
                for s in await js.streams_info()
                if s.config.name and s.config.name.endswith("_LOG")
            ]
            known = f"; logs there: {', '.join(sorted(roots))}" if roots else "; there is no log there"
            raise SourceError(
                f"{where}: no log with root {root!r} (no stream {names.log_stream}){known}"
                + _did_you_mean(root, roots)
            ) from None
    finally:
        await nc.close()


def _did_you_mean(word: str, choices: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(word, sorted(choices), n=3, cutoff=0.5)
    return f" (did you mean: {', '.join(close)}?)" if close else ""


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
            except SourceError as err:
                print(f"kdispatch {command}: {err}", file=sys.stderr)
                return 2
            except Exception as err:
                from eventlog.codec import DecodeError
                from eventlog.embedded import EmbeddedError
                from reconciler.config import ConfigError

                if not isinstance(err, ConnectionError | OSError | TimeoutError | ConfigError | DecodeError | EmbeddedError):
                    raise
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
