"""How long ``kdispatch <verb> --help`` takes, for every verb, next to a bare ``python -c pass``.

Building the parser must not load the service (aiohttp, NATS, structlog, numpy, the leader
loop): a verb imports what it needs when it runs. Each figure is the wall time of a whole
subprocess, as a person at a shell would wait for it; the bare interpreter measured in the same
run shows what is Python's own start-up on this machine at this moment (the machine is shared,
so ratios say more than absolute times). Goal: every verb's median under 0.2 s.

Run: ``.venv/bin/python bench/cli_startup.py [--repeats N]``. The last line is the headline.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reconciler.cli import COMMANDS  # noqa: E402  (the path above first)


def wall_times(argv: list[str], repeats: int) -> list[float]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(argv, capture_output=True, env=env, check=True)  # warm the file cache
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(argv, capture_output=True, env=env, check=True)
        times.append(time.perf_counter() - started)
    return times


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="runs of each command (15)")
    args = parser.parse_args()
    rows: list[tuple[str, float, float]] = []
    bare = wall_times([sys.executable, "-c", "pass"], args.repeats)
    rows.append(("python -c pass", statistics.median(bare), p95(bare)))
    for verb in COMMANDS:
        times = wall_times([sys.executable, "-m", "reconciler.cli", verb, "--help"], args.repeats)
        rows.append((f"kdispatch {verb} --help", statistics.median(times), p95(times)))
    base = rows[0][1]
    print(f"{'command':<28}{'median ms':>10}{'p95 ms':>10}{'x bare':>8}")
    for name, median, tail in rows:
        print(f"{name:<28}{median * 1000:>10.0f}{tail * 1000:>10.0f}{median / base:>8.1f}")
    name, median, _ = max(rows[1:], key=lambda r: r[1])
    verdict = "under" if median < 0.2 else "OVER"
    print(
        f"headline: slowest `{name}` median {median * 1000:.0f} ms ({verdict} 200 ms), "
        f"{median / base:.1f}x a bare `python -c pass` ({base * 1000:.0f} ms), {args.repeats} runs each"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
