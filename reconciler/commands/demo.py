"""``kdispatch demo``: the whole system on this machine, end to end (what ``make demo`` runs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reconciler.commands.argtypes import int_at_least

HELP = "run the end-to-end demo: NATS, webhook (HTTPS), reconciler, 4 simulated clusters, ~200 jobs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--jobs",
        type=int_at_least(16),  # fillers, a stream and a burst
        default=200,
        metavar="N",
        help="about how many jobs to submit (200; at least 16)",
    )
    parser.add_argument(
        "--data-dir", type=Path, default=Path(".kdispatch"), metavar="DIR", help="where the log stays (.kdispatch)"
    )
    parser.add_argument("--fast", action="store_true", help="short run times and a short script (for tests)")
    parser.add_argument("--seed", type=int_at_least(0), default=7, help="seed of the generated jobs (7)")
    parser.add_argument("--quiet", action="store_true", help="no live progress line")
    parser.add_argument(
        "--queues",
        type=Path,
        metavar="PATH",
        help="queue configuration (Kueue objects: a YAML file or directory, e.g. deploy/examples/three-teams.yaml); "
        "default: none, one queue for every job",
    )
    parser.add_argument(
        "--hold", action="store_true", help="afterwards, keep the final state and the web page up until Ctrl-C"
    )


async def run_async(args: argparse.Namespace) -> int:
    from reconciler.demo.run import Options, run_demo
    from reconciler.edge.plugins import PluginDiscoveryError, installed

    try:
        installed()  # discovered once, now: the leader and the final replay --verify use these
    except PluginDiscoveryError as err:
        print(f"kdispatch demo: {err}")
        return 2
    queues = None
    if args.queues is not None:
        from eventlog.kube.kueue import QueueConfigError, load_queues

        try:
            queues = load_queues(args.queues)
        except QueueConfigError as err:
            print(f"kdispatch demo: invalid queue configuration: {err}", file=sys.stderr)
            return 2
    return await run_demo(
        Options(
            jobs=args.jobs,
            data_dir=args.data_dir,
            fast=args.fast,
            seed=args.seed,
            quiet=args.quiet,
            queues=queues,
            queues_path=args.queues,
            hold=args.hold,
        )
    )
