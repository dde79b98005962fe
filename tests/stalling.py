"""Stalling a test's nats-server: SIGSTOP it and wait until it has really stopped.

``kill(pid, SIGSTOP)`` returns once the signal is queued, not once the process is stopped: each
thread of the (Go) server stops only when it next passes through the kernel. On a busy machine
the thread picked to take the signal may wait for a CPU while another thread, already running on
the other core, goes on serving the connection, and acknowledges publishes sent just after
``kill`` returned. Under a CPU hog that happened in 3 of 30 runs of the batcher test; waiting for
the kernel's own "stopped" report (every thread has stopped) it happened in none.
"""

from __future__ import annotations

import os
import signal

from eventlog.embedded import EmbeddedNats
from tests.waiting import eventually


def _stopped(pid: int) -> bool:
    # The server is our child (``EmbeddedNats`` starts it with Popen): the kernel reports it to
    # waitid only once the whole thread group has stopped. WNOWAIT leaves that report in place.
    info = os.waitid(os.P_PID, pid, os.WSTOPPED | os.WNOHANG | os.WNOWAIT)
    return info is not None and info.si_code == os.CLD_STOPPED


async def stall(server: EmbeddedNats) -> int:
    """Stop ``server`` (connections stay open, nothing is answered); its pid, for SIGCONT."""
    pid = server.pid
    assert pid is not None, "the server is not running"
    os.kill(pid, signal.SIGSTOP)
    try:
        await eventually(
            lambda: _stopped(pid), what=f"nats-server pid {pid} to stop after SIGSTOP", interval_s=0.005
        )
    except BaseException:
        os.kill(pid, signal.SIGCONT)  # the caller's clean-up can then stop it
        raise
    return pid
