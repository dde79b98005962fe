"""A supervised child process (the webhook under ``kdispatch serve --webhook``).

The reconciler must never import the webhook, so ``serve`` runs ``python -m webhook`` as a
child: restarted with a growing back-off if it dies, terminated (SIGTERM, then SIGKILL after a
grace period) when ``serve`` stops. Its stdout/stderr go straight to ours, so its JSON log lines
interleave with the reconciler's.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import signal
from collections.abc import Callable, Sequence

from reconciler.edge.logging import get_logger

log = get_logger("reconciler.child")


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: SIGTERM the child if ``serve`` itself dies (even by SIGKILL), so none is orphaned."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Supervised:
    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        grace_s: float = 10.0,
        max_backoff_s: float = 30.0,
        on_restart: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.grace_s = grace_s
        self.max_backoff_s = max_backoff_s
        self.on_restart = on_restart
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Keep the child running until ``stop`` is set (or this task is cancelled); then
        terminate it. Never leaves the child behind."""
        try:
            await self._supervise(stop)
        finally:
            # Shielded: a cancelled supervisor must still reap its child.
            await asyncio.shield(self.terminate())

    async def _supervise(self, stop: asyncio.Event) -> None:
        backoff = 0.5
        bound = log.bind(child=self.name)
        while not stop.is_set():
            self.proc = await asyncio.create_subprocess_exec(*self.argv, preexec_fn=_die_with_parent)
            self.starts += 1
            if self.starts > 1 and self.on_restart is not None:
                self.on_restart()
            bound.info("child_started", pid=self.proc.pid, argv=self.argv, starts=self.starts)
            started = asyncio.get_running_loop().time()
            waiter = asyncio.ensure_future(self.proc.wait())
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if stop.is_set():
                waiter.cancel()
                return
            code = waiter.result()
            # A child that ran a while before dying gets restarted quickly; a crash loop backs off.
            if asyncio.get_running_loop().time() - started > 30:
                backoff = 0.5
            bound.error("child_exited", pid=self.proc.pid, code=code, restart_in_s=backoff)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=backoff)
            backoff = min(backoff * 2, self.max_backoff_s)

    async def terminate(self) -> None:
        proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), timeout=self.grace_s)
        except TimeoutError:
            log.warning("child_killed", child=self.name, pid=proc.pid, grace_s=self.grace_s)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        log.info("child_stopped", child=self.name, pid=proc.pid, code=proc.returncode)
