"""bench/soak.py in a short configuration: the whole system (3 nats-servers, the webhook, two
reconcilers, the Kubernetes stand-ins with simulated workers in their own process) under load,
with one fault of each kind on the seeded schedule. It must end with every accepted job in the log
exactly once, no double placement and ``replay --verify`` passing.

Short on purpose (about 75 s of load, 3-4 minutes in all on a busy 2-core machine, within the
test budget rather than the 2 minutes the soak's own CI figure names): faults every 9 s after
12 s: seven faults, so each of the six kinds comes at least once. RSS is not judged here
(``--rss-growth 1``): over half of a 75-second run a process is still warming up, and one
overload burst moves the webhook's RSS by more than any leak would in that time; the 10-minute
default judges it at 5%. Nothing here asserts a time."""

from __future__ import annotations

import pytest

from bench import soak

pytestmark = pytest.mark.timeout(900)


def test_a_short_soak_loses_nothing_and_verifies(capsys: pytest.CaptureFixture[str]) -> None:
    code = soak.main(
        [
            "--minutes", "1.25",
            "--rate", "5",
            "--fault-every", "9",
            "--warmup", "12",
            "--quiet-end", "8",
            "--bad-burst", "60",
            "--overload-burst", "150",
            "--settle", "180",
            "--rss-growth", "1",
        ]
    )
    out = capsys.readouterr().out
    headline = out.strip().splitlines()[-1]
    assert code == 0, out[-6000:]
    assert headline.startswith("soak PASS"), headline
    faults = next(line for line in out.splitlines() if line.startswith("faults survived"))
    for kind in soak.KINDS:
        assert kind in faults, faults
