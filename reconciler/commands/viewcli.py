"""What ``kdispatch status`` and ``kdispatch queue`` share: folding the log to a state (from the
latest snapshot, like ``replay``), ``-o table|json|yaml`` like kubectl, and the table layout.

Kept free of heavy imports at module level: building the parser must not load the core."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from reconciler.commands.argtypes import until
from reconciler.edge.logsource import add_source_arguments, open_source, parse_until

if TYPE_CHECKING:
    from reconciler import core
    from reconciler.forecast import DurationLearner

FORMATS = ("table", "json", "yaml")


def add_view_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o", "--output", choices=FORMATS, default="table", help="table (default), json or yaml, like kubectl"
    )
    parser.add_argument(
        "--until", type=until, metavar="SEQ|TIME", help="as it was at this log sequence or time (ISO 8601, UTC)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar (stderr) on long logs")
    add_source_arguments(parser)


async def folded_state(
    args: argparse.Namespace, *, command: str, learner: DurationLearner | None = None
) -> tuple[core.State, str] | int:
    """The state at the end of the log the arguments name, and where it was read; or an exit code
    (after saying why on stderr). ``learner`` (start-time forecasts) is shown the whole log up
    to that state: what jobs took is not in the state, nor in a snapshot."""
    from reconciler.edge import logging as klog
    from reconciler.edge.plugins import PluginDiscoveryError, installed, warning_lines
    from reconciler.edge.progress import Progress
    from reconciler.history.rebuild import load_snapshot
    from reconciler.history.replay import replay

    klog.configure(level="error", role="cli")  # stdout is for the command's output
    try:
        plugins = installed()
    except PluginDiscoveryError as err:
        print(f"kdispatch {command}: {err}", file=sys.stderr)
        return 2
    until_seq, until_ms = parse_until(args.until) if args.until else (None, None)
    async with open_source(args) as source:
        last = await source.reader.last_seq()
        if last == 0:
            print(f"kdispatch {command}: {source.description} has no log entries", file=sys.stderr)
            return 1
        upto = min(last, until_seq) if until_seq is not None else last
        state, snap_seq = None, 0
        if until_ms is None:  # a snapshot is at a sequence; a time needs the fold from the start
            state, snap_seq, _, _ = await load_snapshot(source.snapshots, at_or_before=upto, plugins=plugins)
        result = await replay(
            source.reader,
            state=state,
            from_seq=snap_seq + 1,
            until_seq=until_seq,
            until_ms=until_ms,
            progress=Progress(total=max(upto - snap_seq, 0), label=command, enabled=not args.quiet),
            plugins=plugins,
        )
        if learner is not None:
            async for chunk in source.reader.read(until_seq=result.state.seq):
                for entry in chunk:
                    learner.observe(entry)
    for warning in warning_lines(command, result.plugin_problems):
        print(warning, file=sys.stderr)
    return result.state, source.description


def write_document(doc: dict[str, Any], fmt: str, *, out: TextIO) -> None:
    """``-o json`` / ``-o yaml``: the rows as the API gives them (``docs/api.md``)."""
    import msgspec

    plain = msgspec.to_builtins(doc)
    if fmt == "json":
        import json

        out.write(json.dumps(plain, indent=2) + "\n")
    else:
        import yaml

        out.write(yaml.safe_dump(plain, sort_keys=False, allow_unicode=True))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """kubectl's layout: upper-case headers, columns three spaces apart, no borders."""
    cells = [[str(h).upper() for h in headers], *[[_cell(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    return " ".join(str(value).split())  # one line per row, whatever a reason contains


def amount(resource: str, value: int) -> str:
    """Resources as people write them: cpu in cores, memory in Gi."""
    if value == 0:
        return "0"
    if resource == "cpu":
        return f"{value / 1000:g}"
    if resource in ("memory", "ephemeral-storage") or resource.endswith("storage"):
        gi = value / (1 << 30)
        return f"{gi:.4g}Gi" if gi >= 1 else f"{value / (1 << 20):.4g}Mi"
    return str(value)


def usage(used: dict[str, int], total: dict[str, int] | None) -> str:
    """``gpu 12/16 cpu 26/64``: used over total per resource (total left out where unknown)."""
    names = [n for n in (total or used) if (total or {}).get(n) or used.get(n)]
    parts = []
    for name in names:
        # "cpu", "nvidia.com/gpu", or with queues configured "flavor/cpu", "gpu/nvidia.com/gpu"
        head, _, rest = name.partition("/")
        flavored = bool(rest) and "." not in head
        resource = rest if flavored else name
        short = resource.rsplit("/", 1)[-1]
        if flavored:
            short = f"{head}/{short}"
        have = f"/{amount(resource, total[name])}" if total and name in total else ""
        parts.append(f"{short} {amount(resource, used.get(name, 0))}{have}")
    return " ".join(parts)
