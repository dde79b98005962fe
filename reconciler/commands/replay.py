"""``kdispatch replay``: rebuild state from the log, verify every decision, or try another policy."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import TYPE_CHECKING, Any, TextIO

from reconciler.commands.argtypes import until
from reconciler.edge.logsource import (
    add_source_arguments,
    format_ms,
    friendly_errors,
    open_source,
    parse_until,
)

# The core, the replay and what-if machinery load when the command runs: `--help` stays fast.
if TYPE_CHECKING:
    from reconciler.edge.plugins import PluginProblem, PluginSet
    from reconciler.history.replay import Mismatch, ReplayResult

HELP = "rebuild state from the log (--until), verify every decision (--verify), or replay under another policy"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--until", type=until, metavar="SEQ|TIME", help="stop at this log sequence or time (ISO 8601, UTC)")
    parser.add_argument(
        "--verify",
        action="store_true",
        help="recompute every decision batch; exit 1 at the first difference, printing both "
        "(or when the log's plugins are missing or other versions here)",
    )
    parser.add_argument(
        "--workers",
        type=_workers,
        default=1,
        metavar="N",
        help="with --verify: recompute on N processes, the log cut at decision batches "
        "(each cut's state checked against the verified fold before it; default 1)",
    )
    parser.add_argument(
        "--profile",
        metavar="FILE",
        help="replay the outside inputs under this policy (config, policy or profile YAML) and compare",
    )
    parser.add_argument(
        "--queues",
        metavar="PATH",
        help="what if this queue configuration (Kueue objects, a YAML file or directory) had been in force "
        "instead of the log's; with --profile, under that policy too",
    )
    parser.add_argument(
        "--show-policy",
        action="store_true",
        help="print the log's policy (the one in force at the end, or at --until) as a file for --profile",
    )
    parser.add_argument("--json", action="store_true", help="print the final state as one JSON document")
    parser.add_argument("--quiet", action="store_true", help="no progress bar (stderr) on long logs")
    add_source_arguments(parser)


def _workers(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of processes (give 1, 2, ...)") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n}: give at least 1 process")
    return n


@friendly_errors("replay")
async def run_async(args: argparse.Namespace) -> int:
    from eventlog import codec
    from reconciler import core
    from reconciler.config import ConfigError
    from reconciler.edge import logging as klog
    from reconciler.edge.plugins import PluginDiscoveryError, installed, warning_lines
    from reconciler.edge.progress import Progress
    from reconciler.history.rebuild import load_snapshot
    from reconciler.history.replay import describe_gap, replay

    klog.configure(level="error", role="cli")  # stdout is for the command's output
    try:
        until_seq, until_ms = parse_until(args.until) if args.until else (None, None)
    except ValueError as err:
        print(f"kdispatch replay: {err}", file=sys.stderr)
        return 2
    if args.workers > 1 and (not args.verify or args.profile or args.queues):
        what = "--profile" if args.profile else "--queues" if args.queues else "without --verify"
        print(
            f"kdispatch replay: --workers spreads --verify over processes; it does not go {what}",
            file=sys.stderr,
        )
        return 2
    try:
        plugins = installed()
    except PluginDiscoveryError as err:
        print(f"kdispatch replay: {err}", file=sys.stderr)
        return 2
    if args.show_policy:
        if args.profile or args.queues or args.verify or args.json:
            other = "--profile" if args.profile else "--queues" if args.queues else "--verify" if args.verify else "--json"
            print(f"kdispatch replay: --show-policy prints a policy file; it does not go with {other}", file=sys.stderr)
            return 2
        return await _show_policy(args, until_seq=until_seq, until_ms=until_ms)
    if args.profile or args.queues:
        from eventlog.kube.kueue import QueueConfigError

        try:
            return await _run_whatif(args, plugins, until_seq=until_seq, until_ms=until_ms)
        except ConfigError as err:
            print(f"kdispatch replay: invalid --profile: {err}", file=sys.stderr)
            return 2
        except QueueConfigError as err:
            print(f"kdispatch replay: invalid --queues: {err}", file=sys.stderr)
            return 2
    async with open_source(args) as source:
        last = await source.reader.last_seq()
        if last == 0:
            what = "nothing to verify" if args.verify else "nothing to replay"
            print(f"kdispatch replay: {what}: {source.description} has no log entries", file=sys.stderr)
            return 1
        total = until_seq if until_seq is not None else last
        state = None
        from_seq = 1
        if not args.verify and until_ms is None:
            # Plain rebuilds start from the latest snapshot; --verify must recompute from seq 1.
            state, snap_seq, _, _ = await load_snapshot(source.snapshots, at_or_before=total, plugins=plugins)
            from_seq = snap_seq + 1
        progress = Progress(total=max(total - from_seq + 1, 0), enabled=not args.quiet)
        if args.verify and args.workers > 1:
            from reconciler.history import parallel

            result = await parallel.verify(
                source.reader,
                workers=args.workers,
                until_seq=until_seq,
                until_ms=until_ms,
                progress=progress,
                plugins=plugins,
            )
        else:
            result = await replay(
                source.reader,
                state=state,
                from_seq=from_seq,
                until_seq=until_seq,
                until_ms=until_ms,
                verify=args.verify,
                progress=progress,
                plugins=plugins,
            )
    out = sys.stdout
    if args.verify and result.plugin_problems:
        if args.json:
            doc = {"verify": "plugins", "problems": [dict(p.as_json(), seq=seq) for seq, p in result.plugin_problems]}
            out.write(json.dumps(doc, sort_keys=True) + "\n")
        else:
            _print_plugin_problems(result.plugin_problems, out)
        return 1
    for warning in warning_lines("replay", result.plugin_problems):
        print(warning, file=sys.stderr)
    if args.verify and result.gap is not None:
        # Lines lost from the log: every decision after them would be compared against a state
        # that misses inputs, so a mismatch would say nothing about the core.
        gap = describe_gap(result.gap, args.file or source.description, export=bool(args.file))
        if args.json:
            out.write(json.dumps({"verify": "gap", "missing": list(result.gap), "message": gap}) + "\n")
        else:
            out.write(f"verify: NOT VERIFIED: {gap}\n")
            out.write(f"  {result.verified_batches} decision batches before the gap were recomputed, all identical\n")
        return 1
    if result.mismatch is not None:
        if args.json:
            out.write(json.dumps(_mismatch_json(result.mismatch), sort_keys=True) + "\n")
        else:
            _print_mismatch(result.mismatch, out)
        return 1
    summary = core.summary(result.state)
    if args.json:
        out.write(codec.encode(summary).decode() + "\n")
    else:
        _print_summary(result, summary, where=source.description, out=out)
        if args.verify:
            out.write(
                f"verify: {result.verified_batches} decision batches recomputed, all identical; "
                f"nothing missing at {result.verified_quiet} points where none were recorded\n"
            )
    if args.verify and result.incomplete_batches:
        seqs = ", ".join(str(s) for s in result.incomplete_batches)
        print(f"verify: decision batches cut short and never completed, starting at seq {seqs}", file=sys.stderr)
        return 1
    return 0


def _print_plugin_problems(problems: list[tuple[int, PluginProblem]], out: TextIO) -> None:
    out.write("verify: NOT VERIFIED: the log's policy uses plugins that are missing or different here\n")
    for seq, p in problems:
        out.write(f"  {p.describe()} (policy in force at seq {seq})\n")
        out.write(f"    to verify this log: {p.remedy()}\n")
    out.write("  decisions recomputed with other plugins would differ for that reason alone; nothing was compared\n")


def _print_summary(result: ReplayResult, summary: dict[str, Any], *, where: str, out: TextIO) -> None:
    out.write(f"log: {where}\n")
    if result.entries == 0:
        out.write("replayed 0 entries (the log is empty or the bound is before its start)\n")
    else:
        out.write(
            f"replayed {result.entries} entries up to seq {result.last_seq} ({format_ms(result.last_at_ms)}): "
            f"{result.inputs} inputs, {result.decisions} decisions in {result.batches} batches\n"
        )
    jobs: dict[str, Any] = summary.get("jobs", {})
    phases = Counter(str(j.get("phase")) for j in jobs.values())
    out.write(f"jobs: {len(jobs)}" + "".join(f"  {p} {n}" for p, n in sorted(phases.items())) + "\n")
    clusters: dict[str, Any] = summary.get("clusters", {})
    health = ", ".join(f"{name} {c.get('health', '?')}" for name, c in sorted(clusters.items()))
    out.write(f"clusters: {len(clusters)}" + (f"  ({health})" if health else "") + "\n")


def _print_mismatch(m: Mismatch, out: TextIO) -> None:
    from eventlog import codec
    from eventlog import events as ev
    from reconciler.offline.render import line

    where = f"the decision batch starting at seq {m.seq}" if m.recorded else f"seq {m.seq}"
    out.write(f"verify: MISMATCH at {where} ({format_ms(m.at_ms)})\n")
    out.write(f"  {m.reason}\n")
    first = m.first_difference
    out.write(f"  recorded ({len(m.recorded)} entries in the log):\n")
    for i, entry in enumerate(m.recorded):
        mark = ">" if i == first else " "
        out.write(f"  {mark}{line(entry)}\n")
    out.write(f"  recomputed ({len(m.recomputed)} decisions from decide()):\n")
    for i, event in enumerate(m.recomputed):
        mark = ">" if i == first else " "
        as_entry = ev.LogEntry(seq=m.seq + i, at_ms=m.at_ms, event=event, batch=(i, len(m.recomputed)))
        out.write(f"  {mark}{line(as_entry)}\n")
    out.write(f"  first difference (decision {first}):\n")
    recorded = codec.encode(m.recorded[first].event).decode() if first < len(m.recorded) else "(none)"
    recomputed = codec.encode(m.recomputed[first]).decode() if first < len(m.recomputed) else "(none)"
    out.write(f"  recorded  : {recorded}\n")
    out.write(f"  recomputed: {recomputed}\n")


def _mismatch_json(m: Mismatch) -> dict[str, Any]:
    from eventlog import codec

    return {
        "verify": "mismatch",
        "seq": m.seq,
        "at_ms": m.at_ms,
        "reason": m.reason,
        "first_difference": m.first_difference,
        "recorded": [codec.to_builtins(e) for e in m.recorded],
        "recomputed": [codec.to_builtins(d) for d in m.recomputed],
    }


async def _run_whatif(
    args: argparse.Namespace, plugins: PluginSet, *, until_seq: int | None, until_ms: int | None
) -> int:
    from eventlog.kube.kueue import load_queues
    from reconciler import core
    from reconciler.config import ConfigError
    from reconciler.offline.policydoc import is_single_profile
    from reconciler.offline.report import compare, print_comparison
    from reconciler.offline.whatif import observe
    from reconciler.policy import load_policy_file

    queues = load_queues(args.queues) if args.queues else None  # first: a bad file reads nothing
    policy = None
    if args.profile:
        policy = load_policy_file(args.profile)
        problems = core.validate_policy(policy, plugins.registry)
        if problems:
            raise ConfigError("; ".join(problems), source=args.profile)
    async with open_source(args) as source:
        seen = await observe(source.reader, until_seq=until_seq, until_ms=until_ms)
    single = bool(args.profile) and is_single_profile(args.profile) and seen.policy is not None
    label = args.profile or f"queues {args.queues}"
    comparison = compare(seen, policy, profile=label, plugins=plugins, single_profile=single, queues=queues)
    if args.json:
        sys.stdout.write(json.dumps(comparison.as_json(), sort_keys=True) + "\n")
    else:
        print_comparison(comparison, sys.stdout)
    return 0


async def _show_policy(args: argparse.Namespace, *, until_seq: int | None, until_ms: int | None) -> int:
    from reconciler.offline.policydoc import policy_document
    from reconciler.offline.whatif import observe

    async with open_source(args) as source:
        seen = await observe(source.reader, until_seq=until_seq, until_ms=until_ms)
        where = source.description
    if seen.policy is None:
        print(
            f"kdispatch replay: {where} records no policy (PolicyLoaded) up to that point; "
            "its leader ran the built-in default",
            file=sys.stderr,
        )
        return 1
    last = seen.policies[-1]
    header = (
        f"The policy in force in {where} from seq {last.seq} ({format_ms(last.at_ms)}).\n"
        "Edit and pass to `kdispatch replay --profile FILE`: unchanged, its policy effect is zero."
    )
    sys.stdout.write(policy_document(seen.policy, header=header))
    return 0
