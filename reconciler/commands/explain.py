"""``kdispatch explain NS/NAME``: every decision about a job, and why there and not there.

Replays the log; just before each decision batch that concerns the job, asks the core's
``explain`` for the job's evaluation on that very state (what ``decide`` saw): every cluster with
its filter verdict or its per-plugin scores. Preemptions show who preempted whom.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Any, TextIO

from eventlog import codec
from eventlog import events as ev
from reconciler import core
from reconciler.shell import logging as klog
from reconciler.shell.logsource import add_source_arguments, format_ms, open_source
from reconciler.shell.progress import Progress
from reconciler.shell.render import line
from reconciler.shell.replay import DecisionBatch, replay

HELP = "explain every decision about a job: each cluster's filter verdict or per-plugin scores"

# Decisions for which the per-cluster evaluation is the interesting part.
_EVALUATED = (ev.Nominated, ev.Unschedulable, ev.PreemptionClaimed, ev.Placed)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", metavar="NS/NAME", help="the job on the manager cluster, e.g. team-a/train-1")
    parser.add_argument("--json", action="store_true", help="one JSON document instead of text")
    add_source_arguments(parser)


def concerns(event: ev.Event, key: str) -> bool:
    for attr in ("job", "preemptor"):
        ref = getattr(event, attr, None)
        if isinstance(ref, ev.JobRef) and ref.key == key:
            return True
    victims = getattr(event, "victims", None)
    return isinstance(victims, list) and any(v.key == key for v in victims)


@dataclass
class Step:
    seq: int
    at_ms: int
    decisions: list[ev.LogEntry]
    explanation: Any | None = None
    error: str | None = None


@dataclass
class Story:
    key: str
    steps: list[Step] = field(default_factory=list)
    facts: list[ev.LogEntry] = field(default_factory=list)


async def gather(reader: Any, key: str, *, progress: Progress | None = None) -> tuple[Story, dict[str, Any]]:
    story = Story(key=key)

    def on_input(entry: ev.LogEntry) -> None:
        if concerns(entry.event, key):
            story.facts.append(entry)

    def on_batch(state: core.State, batch: DecisionBatch) -> None:
        about = [e for e in batch.entries if concerns(e.event, key)]
        if not about:
            return
        step = Step(seq=batch.first.seq, at_ms=batch.first.at_ms, decisions=about)
        if any(isinstance(e.event, _EVALUATED) and _is_subject(e.event, key) for e in about):
            try:
                step.explanation = core.explain(state, key)
            except KeyError:
                step.error = "the job is not known to the state at this point"
        story.steps.append(step)

    result = await replay(reader, on_batch=on_batch, on_input=on_input, progress=progress)
    return story, core.summary(result.state)


def _is_subject(event: ev.Event, key: str) -> bool:
    """The job is the one being placed (not a victim in someone else's claim)."""
    ref = getattr(event, "job", None) or getattr(event, "preemptor", None)
    return isinstance(ref, ev.JobRef) and ref.key == key


async def run_async(args: argparse.Namespace) -> int:
    klog.configure(level="warning", role="cli")  # stdout is for the command's output
    key = args.job.strip()
    if key.count("/") != 1 or key.startswith("/") or key.endswith("/"):
        print(f"kdispatch explain: {args.job!r}: give the job as NAMESPACE/NAME, e.g. team-a/train-1", file=sys.stderr)
        return 2
    async with open_source(args) as source:
        total = await source.reader.last_seq()
        story, summary = await gather(source.reader, key, progress=Progress(total=total, label="explain"))
    current = summary.get("jobs", {}).get(key)
    if args.json:
        sys.stdout.write(codec.encode(_as_json(story, current)).decode() + "\n")
    else:
        _print(story, current, sys.stdout)
    if current is None and not story.facts and not story.steps:
        print(f"kdispatch explain: no job {key} in this log", file=sys.stderr)
        return 1
    return 0


def _as_json(story: Story, current: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "job": story.key,
        "current": current,
        "facts": [codec.to_builtins(e) for e in story.facts],
        "decisions": [
            {
                "seq": s.seq,
                "at_ms": s.at_ms,
                "entries": [codec.to_builtins(e) for e in s.decisions],
                "explanation": codec.to_builtins(s.explanation) if s.explanation is not None else None,
                "error": s.error,
            }
            for s in story.steps
        ],
    }


def _print(story: Story, current: dict[str, Any] | None, out: TextIO) -> None:
    out.write(f"job {story.key}")
    if current is not None:
        out.write(f": now {current.get('phase')}" + (f" on {current['cluster']}" if current.get("cluster") else ""))
    out.write("\n")
    timeline: list[tuple[int, str, Step | None]] = [(e.seq, line(e), None) for e in story.facts]
    timeline += [(s.seq, "", s) for s in story.steps]
    for _seq, text, step in sorted(timeline, key=lambda t: t[0]):
        if step is None:
            out.write(f"  fact    {text}\n")
            continue
        out.write(f"\n  decided at {format_ms(step.at_ms)} (batch at seq {step.seq}):\n")
        for entry in step.decisions:
            out.write(f"          {line(entry)}\n")
            _print_preemption(entry.event, story.key, out)
        if step.error:
            out.write(f"          ({step.error})\n")
        if step.explanation is not None:
            for row in render_explanation(step.explanation):
                out.write(f"          {row}\n")


def _print_preemption(event: ev.Event, key: str, out: TextIO) -> None:
    if isinstance(event, ev.PreemptionClaimed):
        victims = ", ".join(v.key for v in event.victims) or "nobody"
        if event.preemptor.key == key:
            out.write(f"            -> {key} preempts {victims} on {event.cluster} (claim until {format_ms(event.expires_ms)})\n")
        else:
            out.write(f"            -> {key} is preempted by {event.preemptor.key} on {event.cluster}\n")
    elif isinstance(event, ev.Evict) and event.preemptor is not None:
        if event.job.key == key:
            out.write(f"            -> evicted from {event.cluster} for {event.preemptor.key}\n")
        else:
            out.write(f"            -> evicts {event.job.key} from {event.cluster}\n")


def render_explanation(explanation: Any) -> list[str]:
    """A table of clusters from the core's ``JobExplanation`` (whatever fields it has)."""
    data = codec.to_builtins(explanation)
    if not isinstance(data, dict):
        return [str(data)]
    rows: list[str] = []
    head = {k: v for k, v in data.items() if k != "clusters" and not isinstance(v, list | dict)}
    if head:
        rows.append("evaluation: " + " ".join(f"{k}={v}" for k, v in sorted(head.items())))
    clusters = data.get("clusters")
    if not isinstance(clusters, list):
        rows.append(codec.encode(data).decode())
        return rows
    width = max([len(str(c.get("name", c.get("cluster", "")))) for c in clusters] + [7])
    rows.append(f"{'cluster':<{width}}  verdict")
    for c in clusters:
        rows.append(f"{c.get('name', c.get('cluster', '?'))!s:<{width}}  {_verdict(c)}")
    return rows


def _verdict(c: dict[str, Any]) -> str:
    parts: list[str] = []
    feasible = c.get("feasible", c.get("passed"))
    filt = c.get("filter") or c.get("filtered_by") or c.get("plugin")
    reason = c.get("reason")
    if feasible is False or (filt and reason):
        return f"filtered by {filt or '?'}: {reason or ''}".rstrip(": ")
    total = c.get("total", c.get("score"))
    scores = c.get("scores")
    if total is not None:
        parts.append(f"score {total}")
    if isinstance(scores, dict):
        parts.append("(" + ", ".join(f"{k} {v}" for k, v in scores.items()) + ")")
    elif isinstance(scores, list):
        parts.append("(" + ", ".join(_score_item(s) for s in scores) + ")")
    for flag in ("chosen", "nominated", "selected"):
        if c.get(flag):
            parts.append(f"<- {flag}")
    rest = {k: v for k, v in c.items() if k not in {"name", "cluster", "feasible", "passed", "total", "score", "scores",
                                                      "filter", "filtered_by", "plugin", "reason", "chosen", "nominated", "selected"}}
    if rest:
        parts.append(" ".join(f"{k}={v}" for k, v in rest.items()))
    return " ".join(parts) or "feasible"


def _score_item(s: Any) -> str:
    if isinstance(s, dict):
        name = s.get("plugin", s.get("name", "?"))
        value = s.get("score", s.get("value", "?"))
        weight = s.get("weight")
        return f"{name} {value}" + (f"x{weight}" if weight not in (None, 1) else "")
    return str(s)
