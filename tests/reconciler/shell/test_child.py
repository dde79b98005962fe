"""The supervisor that keeps ``serve --webhook``'s child process alive, on real processes."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from reconciler.service.child import Supervised
from tests.waiting import eventually


async def test_a_child_that_dies_is_restarted_and_terminated_on_stop(tmp_path: Path) -> None:
    starts = tmp_path / "starts"
    # Records each start, then dies at once the first two times and stays up the third.
    script = (
        "import pathlib, sys, time\n"
        f"p = pathlib.Path({str(starts)!r}); p.write_text(p.read_text() + 'x' if p.exists() else 'x')\n"
        "sys.exit(3) if len(p.read_text()) < 3 else time.sleep(600)\n"
    )
    restarts: list[int] = []
    child = Supervised("test", [sys.executable, "-c", script], grace_s=5, on_restart=lambda: restarts.append(1))
    stop = asyncio.Event()
    task = asyncio.create_task(child.run(stop))
    await eventually(
        lambda: starts.exists() and len(starts.read_text()) == 3 and child.proc is not None and child.proc.returncode is None,
        timeout_s=20,
        what="the third start, still running",
    )
    assert child.starts == 3 and len(restarts) == 2
    proc = child.proc
    assert proc is not None and proc.returncode is None
    stop.set()
    await asyncio.wait_for(task, timeout=10)
    assert proc.returncode == -15  # SIGTERM, not left running
