"""``kdispatch log``: read the log like ``tail`` (human lines, or one LogEntry JSON per line)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from reconciler.commands.argtypes import did_you_mean, job_key, positive_int, sequence, subject_filter
from reconciler.edge.logsource import add_source_arguments, friendly_errors, open_source

if TYPE_CHECKING:
    from eventlog import events as ev

HELP = "read the log like tail: one line per entry (seq, time, type, job/cluster, key fields)"

FOLLOW_POLL_S = 0.25


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--subject",
        type=subject_filter,
        metavar="FILTER",
        help="NATS subject filter on the log subjects, e.g. 'kd.log.decision.>' or 'kd.log.*.*.team-a.*'",
    )
    parser.add_argument(
        "--job",
        type=job_key,
        metavar="NS/NAME",
        help="only entries about this job (its own, and claims where it is a victim)",
    )
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing new entries as they come")
    parser.add_argument("--json", action="store_true", help="one LogEntry JSON per line")
    parser.add_argument("-n", "--lines", type=positive_int, metavar="N", help="start with the last N entries")
    parser.add_argument("--from-seq", type=sequence, default=1, metavar="SEQ", help="start at this sequence (1)")
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


class _Seen:
    """What was read, to say why nothing was shown: the jobs and subject tokens the log has."""

    def __init__(self) -> None:
        self.entries = 0
        self.shown = 0
        self.jobs: set[str] = set()
        self.tokens: set[str] = set()

    def add(self, entry: ev.LogEntry, subject: str) -> None:
        from eventlog import events as ev

        self.entries += 1
        job = getattr(entry.event, "job", None)
        if isinstance(job, ev.JobRef):
            self.jobs.add(job.key)
        self.tokens.update(subject.split(".")[2:])


@friendly_errors("log")
async def run_async(args: argparse.Namespace) -> int:
    import asyncio

    from eventlog import codec
    from eventlog.subjects import log_subject
    from reconciler.edge import logging as klog
    from reconciler.offline.render import concerns, line

    klog.configure(level="error", role="cli")  # stdout is for the command's output
    pattern = _normalise(args.subject, args.root) if args.subject else None
    prefix = f"{args.root}.log"
    out = sys.stdout
    seen = _Seen()

    def show(entry: ev.LogEntry) -> None:
        subject = log_subject(entry.event)
        if prefix != "kd.log":
            subject = prefix + subject[len("kd.log") :]
        seen.add(entry, subject)
        if args.job is not None and not concerns(entry.event, args.job):
            return
        if pattern is not None and not subject_matches(pattern, subject):
            return
        seen.shown += 1
        out.write(codec.encode(entry).decode() + "\n" if args.json else line(entry) + "\n")

    async with open_source(args) as source:
        last = await source.reader.last_seq()
        if last == 0 and not args.follow:
            print(f"kdispatch log: {source.description} has no log entries", file=sys.stderr)
            return 1
        start = args.from_seq
        if args.lines is not None:
            start = max(start, last - args.lines + 1)
        if start > last and not args.follow:
            print(f"kdispatch log: --from-seq {start}: the log ends at seq {last}", file=sys.stderr)
            return 1
        next_seq = start
        while True:
            async for chunk in source.reader.read(from_seq=next_seq):
                for entry in chunk:
                    show(entry)
                    next_seq = entry.seq + 1
                out.flush()
            if not args.follow:
                return _nothing_shown(args, seen, where=source.description)
            await asyncio.sleep(FOLLOW_POLL_S)


def _nothing_shown(args: argparse.Namespace, seen: _Seen, *, where: str) -> int:
    """0 if something was printed; else say on stderr what did not match, and 1 (like grep)."""
    if seen.shown:
        return 0
    span = f"{seen.entries} entries read from {where}"
    if args.job is not None and args.job not in seen.jobs:
        print(f"kdispatch log: no job {args.job} in {span}" + did_you_mean(args.job, seen.jobs), file=sys.stderr)
        return 1
    if args.subject is not None:
        near = ""
        for token in args.subject.split(".")[2:]:
            if token not in ("*", ">") and token not in seen.tokens:
                near = f"; no subject has {token!r}" + did_you_mean(token, seen.tokens)
                break
        print(f"kdispatch log: nothing matches --subject {args.subject} in {span}{near}", file=sys.stderr)
        return 1
    print(f"kdispatch log: nothing to show ({span})", file=sys.stderr)
    return 1
