"""``kdispatch queue [QUEUE]``: the jobs waiting to be dispatched, in the order ``decide`` will try
them (priority, claim holders, submission), each with its position, why it waits and when it is
expected to start (``reconciler.forecast``) — the rows of ``/api/v1/jobs`` for waiting jobs,
folded from the log."""

from __future__ import annotations

import argparse
import sys

from reconciler.commands.argtypes import did_you_mean, int_at_least
from reconciler.commands.viewcli import add_view_arguments, folded_state, table, usage, write_document
from reconciler.edge.logsource import format_ms, friendly_errors

HELP = "pending jobs in dispatch order, with their position, why they wait and when they are expected to start"
DEFAULT_ESTIMATE_LIMIT = 100  # reconciler.forecast.DEFAULT_LIMIT, without importing the core here


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("queue", nargs="?", metavar="QUEUE", help="only this queue (default: every queue)")
    parser.add_argument(
        "--estimate-limit",
        type=int_at_least(0),
        default=DEFAULT_ESTIMATE_LIMIT,
        metavar="N",
        help=f"estimate the start of the first N pending jobs in dispatch order (default {DEFAULT_ESTIMATE_LIMIT}; 0: none)",
    )
    add_view_arguments(parser)


@friendly_errors("queue")
async def run_async(args: argparse.Namespace) -> int:
    from reconciler import core, forecast, view

    learner = forecast.DurationLearner()
    folded = await folded_state(args, command="queue", learner=learner)
    if isinstance(folded, int):
        return folded
    state, where = folded

    summary = core.summary(state)
    if args.queue is not None:
        known = [q.name for q in view.queue_rows(state, summary)]
        if args.queue not in known:
            print(
                f"kdispatch queue: no queue {args.queue!r} in {where} (queues: {', '.join(known)})"
                + did_you_mean(args.queue, known),
                file=sys.stderr,
            )
            return 1
    estimates = {}
    if args.estimate_limit > 0:
        estimates = forecast.estimate_starts(
            state, now_ms=state.now_ms, durations=learner.durations(), limit=args.estimate_limit
        )
    rows = view.job_rows(state, summary, queue=args.queue, waiting_only=True, estimates=estimates)
    if args.output != "table":
        doc = {"seq": state.seq, "at_ms": state.now_ms, "queue": args.queue, "items": rows}
        write_document(doc, args.output, out=sys.stdout)
        return 0
    out = sys.stdout
    scope = f"queue {args.queue}" if args.queue else "every queue"
    out.write(f"{where}, log seq {state.seq} ({format_ms(state.now_ms)}): {len(rows)} waiting in {scope}\n")
    if not rows:
        return 0
    out.write("\n")
    out.write(
        table(
            ["#", "queue", "job", "phase", "priority", "demand", "expected start", "reason"],
            [
                [
                    r.position,
                    r.queue,
                    r.key,
                    r.phase,
                    r.priority,
                    usage(r.demand, None),
                    forecast.expected_cell(estimates.get(r.key), now_ms=state.now_ms),
                    r.reason,
                ]
                for r in rows
            ],
        )
    )
    return 0
