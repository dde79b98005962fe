"""``kdispatch status``: queues (pending, admitted, usage vs quota and fair share) and clusters
(capacity, usage, health), folded from the log — the same rows as ``/api/v1/queues`` and
``/api/v1/clusters``."""

from __future__ import annotations

import argparse
import sys

from reconciler.commands.viewcli import add_view_arguments, folded_state, table, usage, write_document
from reconciler.edge.logsource import format_ms, friendly_errors

HELP = "queues (pending, admitted, usage vs quota, fair share) and clusters (capacity, usage, health)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_view_arguments(parser)


@friendly_errors("status")
async def run_async(args: argparse.Namespace) -> int:
    folded = await folded_state(args, command="status")
    if isinstance(folded, int):
        return folded
    state, where = folded
    from reconciler import core, view

    summary = core.summary(state)
    queues = view.queue_rows(state, summary)
    clusters = view.cluster_rows(state)
    if args.output != "table":
        doc = {"seq": state.seq, "at_ms": state.now_ms, "queues": queues, "clusters": clusters}
        write_document(doc, args.output, out=sys.stdout)
        return 0
    out = sys.stdout
    out.write(f"{where}, log seq {state.seq} ({format_ms(state.now_ms)})\n\n")
    # With queues configured: usage and quota per flavor/resource, the cohort and the weight too
    tenancy = any(q.weight is not None for q in queues)
    extra = ["cohort", "weight"] if tenancy else []
    out.write(
        table(
            ["queue", "pending", "admitted", "suspended", "finished", "usage", "quota", "fair share", *extra],
            [
                [
                    q.name,
                    q.pending,
                    q.admitted,
                    q.suspended,
                    q.finished,
                    usage(q.usage, q.quota),
                    usage(q.quota, None) if q.quota else None,
                    f"{q.fair_share:.2f}" if q.fair_share is not None else None,
                    *([q.cohort, f"{q.weight:g}" if q.weight is not None else None] if tenancy else []),
                ]
                for q in queues
            ],
        )
    )
    out.write("\n")
    out.write(
        table(
            ["cluster", "health", "jobs", "used / capacity", "taints"],
            [[c.name, c.health, c.jobs, usage(c.used, c.capacity), ",".join(c.taints)] for c in clusters],
        )
    )
    return 0
