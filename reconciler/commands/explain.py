"""``kdispatch explain NS/NAME``: every decision about a job, and why there and not there.

Replays the log; just before each decision about the job, asks the core's ``explain`` for the
job's evaluation on that very state — the inputs before the batch plus the batch's earlier
decisions, which is what ``decide`` saw when it got to this job: every cluster with its filter
verdict or its per-plugin scores. Preemptions show who preempted whom.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from eventlog import events as ev
from reconciler.commands.argtypes import did_you_mean, job_key
from reconciler.edge.logsource import add_source_arguments, format_ms, friendly_errors, open_source

# The core and the replay machinery load when the command runs, not to build the parser.
if TYPE_CHECKING:
    from reconciler import core
    from reconciler.core.queues.facts import QueueFacts
    from reconciler.edge.plugins import PluginSet
    from reconciler.edge.progress import Progress

HELP = "explain every decision about a job: each cluster's filter verdict or per-plugin scores"

# Decisions for which the per-cluster evaluation is the interesting part.
_EVALUATED = (ev.Nominated, ev.Unschedulable, ev.PreemptionClaimed)
_WAITING = ("Queued", "Unschedulable", "Suspended")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job", type=job_key, metavar="NS/NAME", help="the job on the manager cluster, e.g. team-a/train-1")
    parser.add_argument("--json", action="store_true", help="one JSON document instead of text")
    parser.add_argument("--quiet", action="store_true", help="no progress bar (stderr) on long logs")
    add_source_arguments(parser)


@dataclass
class Step:
    seq: int
    at_ms: int
    decisions: list[ev.LogEntry]
    explanation: Any | None = None
    explained_at: int | None = None  # the seq of the decision the explanation is for
    error: str | None = None


@dataclass
class Story:
    key: str
    steps: list[Step] = field(default_factory=list)
    facts: list[ev.LogEntry] = field(default_factory=list)
    now: Any | None = None  # the evaluation at the end of the log, for a job still waiting


async def gather(
    reader: Any, key: str, *, progress: Progress | None = None, plugins: PluginSet | None = None
) -> tuple[Story, dict[str, Any]]:
    from reconciler import core
    from reconciler.edge.plugins import warning_lines
    from reconciler.history.replay import replay
    from reconciler.offline.render import concerns

    story = Story(key=key)

    def on_input(entry: ev.LogEntry) -> None:
        if concerns(entry.event, key):
            story.facts.append(entry)

    def on_decision(state: core.State, entry: ev.LogEntry) -> None:
        if not concerns(entry.event, key):
            return
        batch_seq = entry.seq - (entry.batch[0] if entry.batch else 0)
        if not story.steps or story.steps[-1].seq != batch_seq:
            story.steps.append(Step(seq=batch_seq, at_ms=entry.at_ms, decisions=[]))
        step = story.steps[-1]
        step.decisions.append(entry)
        if step.explanation is None and isinstance(entry.event, _EVALUATED) and _is_subject(entry.event, key):
            step.explained_at = entry.seq
            try:
                step.explanation = core.explain(state, key)
            except KeyError:
                step.error = "the job is not known to the state at this point"

    result = await replay(reader, on_decision=on_decision, on_input=on_input, progress=progress, plugins=plugins)
    for warning in warning_lines("explain", result.plugin_problems):
        print(warning, file=sys.stderr)
    summary = core.summary(result.state)
    current = summary.get("jobs", {}).get(key)
    if current is not None and current.get("phase") in _WAITING:
        # "Why is it still pending?": the evaluation the next decide would start from.
        with contextlib.suppress(KeyError):
            story.now = core.explain(result.state, key)
    return story, summary


def _is_subject(event: ev.Event, key: str) -> bool:
    """The job is the one being placed (not a victim in someone else's claim)."""
    ref = getattr(event, "job", None) or getattr(event, "preemptor", None)
    return isinstance(ref, ev.JobRef) and ref.key == key


@friendly_errors("explain")
async def run_async(args: argparse.Namespace) -> int:
    from eventlog import codec
    from reconciler.edge import logging as klog
    from reconciler.edge.progress import Progress

    klog.configure(level="error", role="cli")  # stdout is for the command's output
    key = args.job
    from reconciler.edge.plugins import PluginDiscoveryError, installed

    try:
        plugins = installed()
    except PluginDiscoveryError as err:
        print(f"kdispatch explain: {err}", file=sys.stderr)
        return 2
    async with open_source(args) as source:
        total = await source.reader.last_seq()
        if total == 0:
            print(f"kdispatch explain: {source.description} has no log entries", file=sys.stderr)
            return 1
        story, summary = await gather(
            source.reader, key, progress=Progress(total=total, label="explain", enabled=not args.quiet), plugins=plugins
        )
    current = summary.get("jobs", {}).get(key)
    if current is None and not story.facts and not story.steps:
        known = summary.get("jobs", {})
        print(
            f"kdispatch explain: no job {key} in {source.description} ({len(known)} jobs)" + did_you_mean(key, known),
            file=sys.stderr,
        )
        return 1
    if args.json:
        sys.stdout.write(codec.encode(_as_json(story, current)).decode() + "\n")
    else:
        _print(story, current, out=sys.stdout)
    return 0


def _as_json(story: Story, current: dict[str, Any] | None) -> dict[str, Any]:
    from eventlog import codec

    return {
        "job": story.key,
        "current": current,
        "now": codec.to_builtins(story.now) if story.now is not None else None,
        "facts": [codec.to_builtins(e) for e in story.facts],
        "decisions": [
            {
                "seq": s.seq,
                "at_ms": s.at_ms,
                "entries": [codec.to_builtins(e) for e in s.decisions],
                "explanation": codec.to_builtins(s.explanation) if s.explanation is not None else None,
                "explained_at": s.explained_at,
                "error": s.error,
            }
            for s in story.steps
        ],
    }


def _print(story: Story, current: dict[str, Any] | None, *, out: TextIO) -> None:
    out.write(f"job {story.key}")
    if current is not None:
        out.write(f": now {current.get('phase')}" + (f" on {current['cluster']}" if current.get("cluster") else ""))
    out.write("\n")
    timeline: list[tuple[int, Step | ev.LogEntry]] = [(e.seq, e) for e in story.facts]
    timeline += [(s.seq, s) for s in story.steps]
    after_step = False
    for _seq, item in sorted(timeline, key=lambda t: t[0]):
        if isinstance(item, ev.LogEntry):
            if after_step:
                out.write("\n")
            out.write(f"  {short_line(item, story.key)}\n")
            after_step = False
            continue
        out.write("\n")  # each decision batch stands apart
        after_step = True
        for entry in item.decisions:
            out.write(f"  {short_line(entry, story.key)}\n")
            _print_preemption(entry.event, story.key, out=out)
            if entry.seq == item.explained_at:
                if item.error:
                    out.write(f"      ({item.error})\n")
                if item.explanation is not None:
                    for row in render_explanation(item.explanation, chosen=_chosen(entry.event)):
                        out.write(f"      {row}\n")
    if story.now is not None:
        out.write(f"\n  now ({current.get('phase') if current else '?'}), at the end of the log:\n")
        for row in render_explanation(story.now):
            out.write(f"      {row}\n")


def short_line(entry: ev.LogEntry, key: str) -> str:
    """``#seq  time  Type  fields`` — the job's own name left out, other jobs' kept."""
    from reconciler.offline.render import describe, subject_key

    subject = subject_key(entry.event)
    who = "" if subject == key else f"{subject} "
    return f"#{entry.seq:<6} {format_ms(entry.at_ms)[11:]}  {type(entry.event).__name__:<17} {who}{describe(entry.event)}".rstrip()


def _print_preemption(event: ev.Event, key: str, *, out: TextIO) -> None:
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


def _chosen(event: ev.Event) -> list[str]:
    if isinstance(event, ev.Nominated):
        return list(event.clusters)
    if isinstance(event, ev.PreemptionClaimed):
        return [event.cluster]
    return []


def render_explanation(x: core.JobExplanation, *, chosen: list[str] | None = None) -> list[str]:
    """The evaluation ``decide`` saw: every cluster, rejected (by which filter, why) or scored."""
    rows = [
        f"why: profile {x.profile} ({x.strategy or '?'}), priority {x.priority}, attempt {x.attempt}"
        + (f" — {x.summary}" if x.summary else "")
    ]
    if x.reason:
        rows.append(f"     {x.reason}")
    width = max([len(c.cluster) for c in x.clusters] + [7])
    for c in x.clusters:
        if c.feasible:
            parts = " + ".join(
                f"{p.plugin} {p.score}" + (f" (weight {p.weight})" if p.weight != 1 else "") for p in c.scores
            )
            mark = "  <- chosen" if c.cluster in (chosen or x.nominated) else ""
            rows.append(f"  {c.cluster:<{width}}  #{c.rank}  score {c.total}" + (f" = {parts}" if parts else "") + mark)
        else:
            why = "; ".join(f"{r.plugin}: {r.reason}" for r in c.rejections) or "rejected"
            rows.append(f"  {c.cluster:<{width}}  --  {why}")
    rows += [f"  {line}" for line in x.claims]
    if x.queue is not None:
        rows += queue_lines(x.queue)
    return rows


def queue_lines(q: QueueFacts) -> list[str]:
    """Why it waits in queue terms: its ClusterQueue, usage against quota, share against weight,
    which queues go first, its place in line."""
    from reconciler.commands.viewcli import amount

    head = f"queue: ClusterQueue {q.cluster_queue}"
    if q.cohort is not None or q.usage or q.position is not None:
        head += f" (cohort {q.cohort or '-'}, weight {q.weight_milli / 1000:g}, {q.strategy}"
        head += f", stopPolicy {q.stop_policy})" if q.stop_policy != "None" else ")"
    if q.position is not None:
        head += f", position {q.position} in its queue"
    rows = [head]
    if q.usage:
        weighted = f"{q.weighted_share:.3f}" if q.weighted_share is not None else "- (weight 0: last)"
        rows.append(f"  share {q.share:.3f} of the fleet, {weighted} divided by its weight (lower goes first)")
        for line in q.usage:
            rows.append(
                f"  {line.flavor}/{line.resource}: {amount(line.resource, line.used)} used of"
                f" {amount(line.resource, line.nominal)} nominal"
                + (f" ({amount(line.resource, line.borrowed)} borrowed)" if line.borrowed else "")
                + f", {amount(line.resource, line.available)} more available"
            )
        rows.append("  goes after: " + (", ".join(q.ahead) if q.ahead else "no other queue (lowest share with jobs waiting)"))
    if q.reason:
        rows.append(f"  waits: {q.reason}")
    return rows
