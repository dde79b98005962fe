"""``kdispatch simulate``: compare dispatch profiles on a job trace, in virtual time."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eventlog.kube.duration import DurationError, parse_duration_ms
from reconciler.commands.argtypes import positive_float, positive_int

if TYPE_CHECKING:
    from reconciler.simulate.nodes import CapacityModel
    from reconciler.simulate.readers import TraceFormat
    from reconciler.simulate.session import ProfileRun

HELP = "Replay a job trace against simulated clusters in virtual time and compare dispatch profiles."

# The goal this command exists to check (docs/simulate.md).
GOAL_COPIES = 1.5
GOAL_P95_RATIO = 1.1

# reconciler.simulate.readers.FORMATS, written out so that `--help` does not load the readers
# (a test checks they agree).
FORMATS = ("alibaba", "tiresias", "csv")

# The capacity scale when --capacity-scale is not given. The Alibaba openb pod lists were sampled
# for bin-packing studies: at their recorded capacity (6,212 GPUs against a peak demand of ~66) no
# job ever waits, every strategy's wait CDF is one vertical line at the admission latency and
# utilization is ~0 %. At 0.0085 (52 GPUs) the trace contends. --capacity-scale 1: as recorded.
DEFAULT_CAPACITY_SCALE: dict[str, float] = {"alibaba": 0.0085}


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
        "--capacity-scale",
        type=positive_float,
        metavar="F",
        help="multiply every cluster's capacity by F (default: 0.0085 for the Alibaba trace, so that it contends; else 1)",
    )
    parser.add_argument(
        "--time-scale", type=positive_float, metavar="F", help="multiply submission times by F (0.1: ten times denser arrivals)"
    )
    parser.add_argument(
        "--admission-latency",
        type=_duration_ms,
        metavar="DURATION",
        help="every cluster admits this long after a copy is created (e.g. 10s; default: the trace's, 1s for the readers)",
    )
    parser.add_argument(
        "--start-estimates",
        action="store_true",
        help="also measure how far the start-time estimates are from the actual starts "
        "(results.json: start_estimate; up to ~30 s CPU more per profile on long traces)",
    )
    parser.add_argument(
        "--save-logs",
        action="store_true",
        help="with --out: also write each profile's log as log-NAME.jsonl.gz (for replay/explain --file)",
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        metavar="N",
        help="split the trace's node list (the Alibaba trace's GPU nodes) into N workers with real nodes; "
        "--capacity-scale then keeps that share of the nodes (default: one pool per GPU model)",
    )
    parser.add_argument(
        "--capacity-model",
        choices=("nodes", "totals", "both"),
        help="with --workers: the workers report their nodes to the core (nodes, the default), only their "
        "usage (totals), or run every profile both ways (both)",
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


def _duration_ms(text: str) -> int:
    try:
        return parse_duration_ms(text)
    except DurationError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _goal_lines(profiles: dict[str, dict[str, Any]], baseline: str | None) -> list[str]:
    from reconciler.simulate.profiles import label
    from reconciler.simulate.report import TIMES, ratio, times

    base = profiles.get(baseline) if baseline is not None else None
    if not base or base.get("wait_p95_s") is None:
        return []
    lines = []
    for name, res in profiles.items():
        if res.get("strategy", {}).get("type") != "TopK" or res.get("remote_copies_per_job") is None:
            continue
        copies = res["remote_copies_per_job"]
        p95, base_p95 = res["wait_p95_s"], base["wait_p95_s"]
        r = ratio(p95, base_p95)
        ok = copies <= GOAL_COPIES and r is not None and r <= GOAL_P95_RATIO
        lines.append(
            f"goal {name}: {copies:.2f} copies/job (<= {GOAL_COPIES}), p95 wait {p95:,.1f} s = {times(r)} "
            f"{label(baseline or '')}'s {base_p95:,.1f} s (<= {GOAL_P95_RATIO}{TIMES}): {'MET' if ok else 'NOT MET'}"
        )
    return lines


def _header(doc: dict[str, Any], *, defaulted: bool) -> str:
    from reconciler.simulate.session import gpus_text, settings_text

    t = doc["trace"]
    default = " (the capacity scale is this trace's default; --capacity-scale 1: as recorded)" if defaulted else ""
    return (
        f"trace {t['source']}: {t['jobs']:,d} jobs on {len(t['clusters'])} clusters, {gpus_text(t)}; "
        f"{settings_text(doc['settings'])}{default}"
    )


def run(args: argparse.Namespace) -> int:
    import msgspec

    from eventlog.kube.kueue import QueueConfigError, load_queues
    from reconciler.config import ConfigError
    from reconciler.edge.plugins import PluginDiscoveryError, installed
    from reconciler.edge.progress import Progress
    from reconciler.simulate.profiles import PolicyDefaults, default_profiles, load_profiles
    from reconciler.simulate.readers import guess_format, load_trace
    from reconciler.simulate.report import class_table, outcomes_table, profiles_table, ratio_table
    from reconciler.simulate.runner import CoreApi
    from reconciler.simulate.scale import scale_capacity, scale_time, with_admission_latency
    from reconciler.simulate.session import results_document, run_profile, write_outputs
    from reconciler.simulate.trace import TraceError

    if args.tenant_mix is not None and args.queues is None:
        print("kdispatch simulate: --tenant-mix splits the trace among the LocalQueues of --queues; give --queues PATH", file=sys.stderr)
        return 2
    if args.capacity_model is not None and args.workers is None:
        print("kdispatch simulate: --capacity-model applies to workers with nodes; give --workers N", file=sys.stderr)
        return 2
    if args.workers is not None and args.clusters is not None:
        print("kdispatch simulate: --workers builds the clusters from the trace's node list; drop --clusters", file=sys.stderr)
        return 2
    if args.save_logs and args.out is None:
        print("kdispatch simulate: --save-logs writes into the --out directory; give --out DIR", file=sys.stderr)
        return 2
    try:
        fmt: TraceFormat = args.format or guess_format(args.trace)
        trace = load_trace(args.trace, fmt=fmt, clusters=args.clusters)
        profiles = load_profiles(args.profile) if args.profile else [(p, PolicyDefaults()) for p in default_profiles()]
    except (TraceError, ConfigError, ValueError, OSError) as err:
        print(f"kdispatch simulate: {err}", file=sys.stderr)
        return 2
    capacity_scale = args.capacity_scale if args.capacity_scale is not None else DEFAULT_CAPACITY_SCALE.get(fmt, 1.0)
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
    models: list[CapacityModel] = ["totals", "nodes"] if args.capacity_model == "both" else [args.capacity_model or "nodes"]
    try:
        if args.workers is not None:
            from reconciler.simulate.nodes import node_workers

            trace, left_out = node_workers(trace, workers=args.workers, scale=capacity_scale)
            if left_out:
                print(
                    f"kdispatch simulate: warning: {left_out} jobs fit no worker's nodes even when empty and are "
                    "left out (a larger --capacity-scale keeps more nodes)",
                    file=sys.stderr,
                )
        elif capacity_scale != 1.0:
            trace = scale_capacity(trace, capacity_scale)
        if args.time_scale is not None:
            trace = scale_time(trace, args.time_scale)
        if args.admission_latency is not None:
            trace = with_admission_latency(trace, args.admission_latency)
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
    from reconciler.simulate.nodes import with_capacity_model

    runs_of = [
        (profile, settings, model if args.workers is not None else None)
        for profile, settings in profiles
        for model in (models if args.workers is not None else [None])
    ]
    for profile, settings, model in runs_of:
        name = profile.name if model is None or len(models) == 1 else f"{profile.name}@{model}"
        started, cpu_started = time.perf_counter(), time.process_time()
        log_path = args.out / f"log-{name}.jsonl.gz" if args.save_logs and args.out is not None else None
        if log_path is not None:
            log_path.parent.mkdir(parents=True, exist_ok=True)
        with Progress(
            total=len(trace.jobs), label=name, unit="jobs submitted", threshold=0, enabled=not args.quiet
        ) as progress:
            result = run_profile(
                trace if model is None else with_capacity_model(trace, model),
                name=name,
                profile=profile,
                settings=settings,
                core=core,
                progress=progress.update,
                log_path=log_path,
                queues=queues,
                start_estimates=args.start_estimates,
            )
            elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
            progress.close(
                f"{result.results['batches']} batches, {result.results['log_entries']} log entries "
                f"in {elapsed:.1f}s ({cpu:.1f}s CPU)"
            )
        runs.append(result)
    run_settings = {
        "format": fmt,
        "capacity_scale": capacity_scale,
        "time_scale": args.time_scale if args.time_scale is not None else 1.0,
        "limit": args.limit,
        "admission_latency_ms": sorted({c.admission_latency_ms for c in trace.clusters}),
    }
    if args.workers is not None:
        from reconciler.simulate.nodes import node_count

        run_settings.update({"workers": args.workers, "nodes": node_count(trace), "capacity_models": models})
    doc = results_document(trace, runs, settings=run_settings)
    print(_header(doc, defaulted=args.capacity_scale is None and capacity_scale != 1.0))
    print(profiles_table(doc["profiles"]))
    if doc["baseline"] is not None and len(runs) > 1:
        print()
        print(ratio_table(doc["profiles"], doc["baseline"]))
    print()
    print(outcomes_table(doc["profiles"]))
    print()
    print(class_table(doc["profiles"]))
    if queues is not None:
        from reconciler.simulate.fairness import queues_table

        print()
        print(queues_table(doc["profiles"]))
    if args.workers is not None:
        from reconciler.simulate.report import floor_lines, wasted_table

        print()
        print(wasted_table(doc["profiles"]))
        for line in floor_lines(doc["profiles"]):
            print(line)
    for line in _goal_lines(doc["profiles"], doc["baseline"]):
        print(line)
    if args.out is not None:
        from reconciler.simulate.plots import write_plots

        written = write_outputs(args.out, doc=doc, runs=runs) + write_plots(args.out, runs, doc=doc)
        print("wrote " + ", ".join(str(p) for p in written))
    return 0
