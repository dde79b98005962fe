"""``kdispatch simulate``: compare dispatch profiles on a job trace, in virtual time."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reconciler.commands.argtypes import positive_float, positive_int

if TYPE_CHECKING:
    from reconciler.simulate.session import ProfileRun

HELP = "Replay a job trace against simulated clusters in virtual time and compare dispatch profiles."

# The goal this command exists to check (docs/simulate.md).
GOAL_COPIES = 1.5
GOAL_P95_RATIO = 1.1

# reconciler.simulate.readers.FORMATS, written out so that `--help` does not load the readers
# (a test checks they agree).
FORMATS = ("alibaba", "tiresias", "csv")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", required=True, type=Path, metavar="FILE", help="trace file (or the Alibaba trace directory)")
    parser.add_argument("--format", choices=FORMATS, help="trace format (default: guessed from the file)")
    parser.add_argument("--clusters", type=Path, metavar="FILE", help="YAML cluster file (the config file's clusters: section)")
    parser.add_argument(
        "--profile",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="profile/policy YAML; repeat to compare (default: all-at-once, incremental-3, topk-1, topk-2)",
    )
    parser.add_argument("--out", type=Path, metavar="DIR", help="write results.json, placements.jsonl and PNG plots here")
    parser.add_argument("--limit", type=positive_int, metavar="N", help="only the first N jobs of the trace (by submission time)")
    parser.add_argument(
        "--capacity-scale", type=positive_float, metavar="F", help="multiply every cluster's capacity by F (e.g. 0.01)"
    )
    parser.add_argument(
        "--time-scale", type=positive_float, metavar="F", help="multiply submission times by F (0.1: 10x denser arrivals)"
    )
    parser.add_argument(
        "--save-logs",
        action="store_true",
        help="with --out: also write each profile's log as log-NAME.jsonl.gz (for replay/explain --file)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--queues",
        type=Path,
        metavar="PATH",
        help="queue configuration (Kueue objects: a YAML file or directory), recorded at the start of each run",
    )
    parser.add_argument(
        "--tenant-mix",
        metavar="Q=F,...",
        help="with --queues: put trace jobs without a queue column in these LocalQueues (namespace/name, a "
        "LocalQueue name or a namespace) in these proportions, by a hash of the job name (default: an even mix)",
    )


def _goal_lines(profiles: dict[str, dict[str, Any]]) -> list[str]:
    base = profiles.get("all-at-once")
    if not base or base.get("wait_p95_s") is None:
        return []
    lines = []
    for name, res in profiles.items():
        if res.get("strategy", {}).get("type") != "TopK" or res.get("remote_copies_per_job") is None:
            continue
        copies = res["remote_copies_per_job"]
        p95, base_p95 = res["wait_p95_s"], base["wait_p95_s"]
        ratio = p95 / base_p95 if base_p95 else (1.0 if p95 == base_p95 else float("inf"))
        ok = copies <= GOAL_COPIES and ratio <= GOAL_P95_RATIO
        lines.append(
            f"goal {name}: {copies:.2f} copies/job (<= {GOAL_COPIES}), p95 wait {p95:.1f}s = {ratio:.2f}x "
            f"all-at-once's {base_p95:.1f}s (<= {GOAL_P95_RATIO}x): {'MET' if ok else 'NOT MET'}"
        )
    return lines


def run(args: argparse.Namespace) -> int:
    import msgspec

    from eventlog.kube.kueue import QueueConfigError, load_queues
    from reconciler.config import ConfigError
    from reconciler.edge.plugins import PluginDiscoveryError, installed
    from reconciler.edge.progress import Progress
    from reconciler.simulate.profiles import PolicyDefaults, default_profiles, load_profiles
    from reconciler.simulate.readers import load_trace
    from reconciler.simulate.report import class_table, profiles_table
    from reconciler.simulate.runner import CoreApi
    from reconciler.simulate.scale import scale_capacity, scale_time
    from reconciler.simulate.session import results_document, run_profile, write_outputs
    from reconciler.simulate.trace import TraceError

    if args.tenant_mix is not None and args.queues is None:
        print("kdispatch simulate: --tenant-mix splits the trace among the LocalQueues of --queues; give --queues PATH", file=sys.stderr)
        return 2
    if args.save_logs and args.out is None:
        print("kdispatch simulate: --save-logs writes into the --out directory; give --out DIR", file=sys.stderr)
        return 2
    try:
        trace = load_trace(args.trace, fmt=args.format, clusters=args.clusters)
        profiles = load_profiles(args.profile) if args.profile else [(p, PolicyDefaults()) for p in default_profiles()]
    except (TraceError, ConfigError, ValueError, OSError) as err:
        print(f"kdispatch simulate: {err}", file=sys.stderr)
        return 2
    try:
        queues = load_queues(args.queues) if args.queues is not None else None
    except QueueConfigError as err:
        print(f"kdispatch simulate: invalid queue configuration: {err}", file=sys.stderr)
        return 2
    if queues is not None:
        from reconciler.simulate.tenants import TenantError, assign_queues, parse_mix

        try:
            mix = parse_mix(args.tenant_mix, queues) if args.tenant_mix is not None else None
            trace = assign_queues(trace, queues, mix)
        except TenantError as err:
            print(f"kdispatch simulate: {err}", file=sys.stderr)
            return 2
    try:
        if args.capacity_scale is not None:
            trace = scale_capacity(trace, args.capacity_scale)
        if args.time_scale is not None:
            trace = scale_time(trace, args.time_scale)
    except ValueError as err:
        print(f"kdispatch simulate: {err}", file=sys.stderr)
        return 2
    if args.limit is not None:
        trace = msgspec.structs.replace(trace, jobs=trace.jobs[: args.limit])
    for resource, count in trace.undeclared_resources().items():
        print(
            f"kdispatch simulate: warning: {count} jobs request {resource}, which no cluster declares; "
            "they can never be placed (add it to the clusters' capacity)",
            file=sys.stderr,
        )
    try:
        plugins = installed()
    except PluginDiscoveryError as err:
        print(f"kdispatch simulate: {err}", file=sys.stderr)
        return 2
    core = CoreApi.real(plugins.registry)
    runs: list[ProfileRun] = []
    for profile, settings in profiles:
        started, cpu_started = time.perf_counter(), time.process_time()
        log_path = args.out / f"log-{profile.name}.jsonl.gz" if args.save_logs and args.out is not None else None
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
        with Progress(
            total=len(trace.jobs), label=profile.name, unit="jobs submitted", threshold=0, enabled=not args.quiet
        ) as progress:
            result = run_profile(
                trace,
                profile=profile,
                settings=settings,
                core=core,
                progress=progress.update,
                log_path=log_path,
                queues=queues,
            )
            elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
            progress.close(
                f"{result.results['batches']} batches, {result.results['log_entries']} log entries "
                f"in {elapsed:.1f}s ({cpu:.1f}s CPU)"
            )
        runs.append(result)
    doc = results_document(trace, runs)
    print(f"trace {doc['trace']['source']}: {len(trace.jobs)} jobs on {len(trace.clusters)} clusters")
    print(profiles_table(doc["profiles"]))
    print()
    print(class_table(doc["profiles"]))
    if queues is not None:
        from reconciler.simulate.fairness import queues_table

        print()
        print(queues_table(doc["profiles"]))
    for line in _goal_lines(doc["profiles"]):
        print(line)
    if args.out is not None:
        from reconciler.simulate.plots import write_plots

        written = write_outputs(args.out, doc=doc, runs=runs) + write_plots(args.out, runs)
        print("wrote " + ", ".join(str(p) for p in written))
    return 0
