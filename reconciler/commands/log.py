"""``kdispatch log``: read the log like ``tail`` (human lines, or one LogEntry JSON per line)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from eventlog import codec
from eventlog import events as ev
from eventlog.subjects import log_subject
from reconciler.edge import logging as klog
from reconciler.edge.logsource import add_source_arguments, friendly_errors, open_source
from reconciler.offline.render import concerns, line

HELP = "read the log like tail: one line per entry (seq, time, type, job/cluster, key fields)"

FOLLOW_POLL_S = 0.25


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--subject",
        metavar="FILTER",
        help="NATS subject filter on the log subjects, e.g. 'kd.log.decision.>' or 'kd.log.*.*.team-a.*'",
    )
    parser.add_argument(
        "--job", metavar="NS/NAME", help="only entries about this job (its own, and claims where it is a victim)"
    )
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing new entries as they come")
    parser.add_argument("--json", action="store_true", help="one LogEntry JSON per line")
    parser.add_argument("-n", "--lines", type=int, metavar="N", help="start with the last N entries")
    parser.add_argument("--from-seq", type=int, default=1, metavar="SEQ", help="start at this sequence")
    add_source_arguments(parser)


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS wildcard semantics: ``*`` is one token, ``>`` one or more trailing tokens."""
    want = pattern.split(".")
    have = subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or (token != "*" and token != have[i]):
            return False
    return len(want) == len(have)


def _normalise(pattern: str, root: str) -> str:
    # Filters may be written against the default root (kd.log.…) or the one given with --root.
    if root != "kd" and pattern.startswith("kd.log."):
        return f"{root}.log." + pattern[len("kd.log.") :]
    return pattern


@friendly_errors("log")
async def run_async(args: argparse.Namespace) -> int:
    klog.configure(level="error", role="cli")  # stdout is for the command's output
    pattern = _normalise(args.subject, args.root) if args.subject else None
    prefix = f"{args.root}.log"
    out = sys.stdout

    def show(entry: ev.LogEntry) -> None:
        if args.job is not None and not concerns(entry.event, args.job):
            return
        if pattern is not None:
            subject = log_subject(entry.event)
            if prefix != "kd.log":
                subject = prefix + subject[len("kd.log") :]
            if not subject_matches(pattern, subject):
                return
        out.write(codec.encode(entry).decode() + "\n" if args.json else line(entry) + "\n")

    async with open_source(args) as source:
        start = args.from_seq
        if args.lines is not None:
            start = max(start, await source.reader.last_seq() - args.lines + 1)
        next_seq = start
        while True:
            async for chunk in source.reader.read(from_seq=next_seq):
                for entry in chunk:
                    show(entry)
                    next_seq = entry.seq + 1
                out.flush()
            if not args.follow:
                return 0
            await asyncio.sleep(FOLLOW_POLL_S)
