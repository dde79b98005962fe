"""Which team each trace job belongs to, for ``kdispatch simulate --queues``.

A job goes to a LocalQueue of the queue configuration: the one its trace names (the CSV
format's ``queue`` column), else one picked by a stable hash of the job's name, in the
proportions of ``--tenant-mix`` (an even mix over every LocalQueue by default). The job is then
submitted as the webhook would submit it: in the LocalQueue's namespace, naming the LocalQueue,
with the ClusterQueue it resolves to. The hash depends on the name alone, so a job keeps its team
whatever else is in the trace (``--limit``, other mixes of other names).

The trace's own priorities are kept: the queue file's WorkloadPriorityClasses and allowed
classes are the webhook's to enforce, and trace priorities are not Kubernetes classes.
"""

from __future__ import annotations

import difflib
import hashlib
from fractions import Fraction

import msgspec

from eventlog.events import LocalQueueSpec, QueuesConfigured
from eventlog.kube.queues import DEFAULT_QUEUE, cluster_queue_of
from reconciler.simulate.trace import Trace

_HASH_SPACE = 1 << 64


class TenantError(ValueError):
    """A ``--tenant-mix`` or a trace's queue column that does not name a usable LocalQueue."""


def describe(lq: LocalQueueSpec) -> str:
    return f"{lq.namespace}/{lq.name}"


def find_local_queue(config: QueuesConfigured, name: str, *, where: str) -> LocalQueueSpec:
    """``namespace/name``; a LocalQueue name found in one namespace only; or a namespace, meaning
    its LocalQueue ``default`` (what a job without a queue label gets)."""
    queues = sorted(config.local_queues, key=lambda q: (q.namespace, q.name))
    if "/" in name:
        ns, _, local = name.partition("/")
        found = [q for q in queues if q.namespace == ns and q.name == local]
    else:
        found = [q for q in queues if q.name == name]
        if not found:
            found = [q for q in queues if q.namespace == name and q.name == DEFAULT_QUEUE]
    if len(found) == 1:
        return found[0]
    options = [describe(q) for q in queues]
    if found:
        raise TenantError(
            f"{where}: {name!r} is a LocalQueue in {len(found)} namespaces; "
            f"write one of {', '.join(describe(q) for q in found)}"
        )
    spellings = options + sorted({q.name for q in queues} | {q.namespace for q in queues})
    close = difflib.get_close_matches(name, spellings, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise TenantError(
        f"{where}: no LocalQueue {name!r} in the queue configuration{hint}; "
        f"expected namespace/name, a LocalQueue name or a namespace; the LocalQueues are {', '.join(options) or 'none'}"
    )


def parse_mix(text: str, config: QueuesConfigured) -> list[tuple[LocalQueueSpec, Fraction]]:
    """``name=fraction,...`` -> LocalQueues and their parts of the trace (normalized: the parts
    need not add up to 1)."""
    out: list[tuple[LocalQueueSpec, Fraction]] = []
    for n, item in enumerate(p.strip() for p in text.split(",")):
        where = f"--tenant-mix: item {n + 1} {item!r}"
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise TenantError(f"{where}: expected name=fraction, e.g. research=0.5,product=0.25,ci=0.25")
        try:
            part = Fraction(value.strip())
        except (ValueError, ZeroDivisionError):
            raise TenantError(f"{where}: {value.strip()!r} is not a number") from None
        if part <= 0:
            raise TenantError(f"{where}: the fraction must be above 0")
        lq = find_local_queue(config, name.strip(), where=where)
        if any(q == lq for q, _ in out):
            raise TenantError(f"{where}: LocalQueue {describe(lq)} is listed twice")
        out.append((lq, part))
    return out


def even_mix(config: QueuesConfigured) -> list[tuple[LocalQueueSpec, Fraction]]:
    queues = sorted(config.local_queues, key=lambda q: (q.namespace, q.name))
    if not queues:
        raise TenantError(f"the queue configuration ({config.source}) has no LocalQueue to put trace jobs in")
    return [(q, Fraction(1)) for q in queues]


def pick(name: str, mix: list[tuple[LocalQueueSpec, Fraction]]) -> LocalQueueSpec:
    """The LocalQueue a stable hash of ``name`` falls in (exact: integer thresholds)."""
    point = int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "big")
    total = sum(part for _, part in mix)
    upto = Fraction(0)
    for lq, part in mix:
        upto += part
        if point < upto / total * _HASH_SPACE:
            return lq
    return mix[-1][0]


def assign_queues(
    trace: Trace, config: QueuesConfigured, mix: list[tuple[LocalQueueSpec, Fraction]] | None = None
) -> Trace:
    """Every job in a LocalQueue (its trace column, else the mix) and that queue's namespace."""
    mix = mix or even_mix(config)
    resolved: dict[tuple[str, str], str] = {}
    named: dict[str, LocalQueueSpec] = {}

    def cluster_queue(lq: LocalQueueSpec) -> str:
        key = (lq.namespace, lq.name)
        if key not in resolved:
            cq = cluster_queue_of(config, namespace=lq.namespace, queue_name=lq.name)
            if cq is None:
                raise TenantError(
                    f"LocalQueue {describe(lq)}: its ClusterQueue {lq.cluster_queue!r} does not exist or does not "
                    f"select namespace {lq.namespace!r} (namespaceSelector); the webhook would deny every job sent there"
                )
            resolved[key] = cq
        return resolved[key]

    jobs = []
    for job in trace.jobs:
        if job.tenant is not None:
            if job.tenant not in named:
                named[job.tenant] = find_local_queue(config, job.tenant, where=f"job {job.name}: queue column")
            lq = named[job.tenant]
        else:
            lq = pick(job.name, mix)
        jobs.append(
            msgspec.structs.replace(
                job, namespace=lq.namespace, queue=lq.name, cluster_queue=cluster_queue(lq)
            )
        )
    return msgspec.structs.replace(trace, jobs=jobs)
