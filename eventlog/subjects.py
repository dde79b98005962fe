"""Subjects a person can filter with the NATS CLI.

Layout (``<stream prefix>.<category>.<type>.<key…>``)::

    kd.in.job.submitted.<namespace>.<name>        kd.log.job.submitted.<namespace>.<name>
    kd.in.cluster.heartbeat.<cluster>             kd.log.cluster.lost.<cluster>
    kd.in.remote.admitted.<namespace>.<name>      kd.log.decision.nominated.<namespace>.<name>
    kd.in.system.tick                             kd.log.decision.claimexpired.<namespace>.<name>
    kd.in.webhook.job.submitted.<namespace>.<name>   (a producer with its own NATS user: SOURCE_TYPES)

Kubernetes names may contain dots, which NATS tokens may not; ``escape`` maps every character a
token forbids to ``~XX`` (hex of its UTF-8 bytes), ``~`` itself included, and the empty string to a
lone ``~``. ``unescape(escape(s)) == s`` for every string.
"""

from __future__ import annotations

import re

from eventlog import events as ev

INBOX_PREFIX = "kd.in"
LOG_PREFIX = "kd.log"

# Characters allowed unescaped in a token: printable ASCII except '.', '*', '>', '~' and space.
_SAFE = frozenset(chr(c) for c in range(0x21, 0x7F)) - {".", "*", ">", "~"}
_ESC = re.compile(r"~([0-9A-F]{2})")
_UNSAFE = re.compile(r"[^\x21-\x7e]|[.*>~]")  # the complement of _SAFE: one search, not a loop per character


def escape(token: str) -> str:
    if token == "":
        return "~"
    if _UNSAFE.search(token) is None:
        return token
    out: list[str] = []
    for ch in token:
        if ch in _SAFE:
            out.append(ch)
        else:
            out.extend(f"~{b:02X}" for b in ch.encode("utf-8"))
    return "".join(out)


def unescape(token: str) -> str:
    if token == "~":
        return ""
    if "~" not in token:
        return token
    data = bytearray()
    i = 0
    while i < len(token):
        m = _ESC.match(token, i)
        if m:
            data.append(int(m.group(1), 16))
            i = m.end()
        else:
            data.extend(token[i].encode("utf-8"))
            i += 1
    return data.decode("utf-8")


# Event type -> (category, verb). Decisions about a cluster read as cluster facts for people
# (``kd.log.cluster.lost.<cluster>``); all other decisions are under ``decision``.
_NAMES: dict[str, tuple[str, str]] = {
    "JobSubmitted": ("job", "submitted"),
    "JobObserved": ("job", "observed"),
    "JobUpdated": ("job", "updated"),
    "JobDeleted": ("job", "deleted"),
    "ClusterRegistered": ("cluster", "registered"),
    "ClusterUpdated": ("cluster", "updated"),
    "ClusterRemoved": ("cluster", "removed"),
    "ClusterHeartbeat": ("cluster", "heartbeat"),
    "ClusterCapacityReported": ("cluster", "capacity"),
    "RemoteCreated": ("remote", "created"),
    "RemoteAdmitted": ("remote", "admitted"),
    "RemoteRejected": ("remote", "rejected"),
    "RemoteEvicted": ("remote", "evicted"),
    "RemoteFinished": ("remote", "finished"),
    "RemoteGone": ("remote", "gone"),
    "Tick": ("system", "tick"),
    "PolicyLoaded": ("system", "policy"),
    "QueuesConfigured": ("system", "queues"),
    "Rejected": ("system", "rejected"),
    "Nominated": ("decision", "nominated"),
    "Placed": ("decision", "placed"),
    "Withdrawn": ("decision", "withdrawn"),
    "Unschedulable": ("decision", "unschedulable"),
    "Requeued": ("decision", "requeued"),
    "ClusterLost": ("cluster", "lost"),
    "ClusterRecovered": ("cluster", "recovered"),
    "PreemptionClaimed": ("decision", "preemptionclaimed"),
    "Evict": ("decision", "evict"),
    "ClaimExpired": ("decision", "claimexpired"),
    "Finished": ("decision", "finished"),
    "CleanUp": ("decision", "cleanup"),
}


def key_tokens(event: ev.Event) -> list[str]:
    """The trailing tokens: ``<namespace>.<name>`` for job events, ``<cluster>`` for cluster ones."""
    job = getattr(event, "job", None) or getattr(event, "preemptor", None)
    if isinstance(job, ev.JobRef):
        return [escape(job.namespace), escape(job.name)]
    cluster = getattr(event, "cluster", None)
    if isinstance(cluster, str):
        return [escape(cluster)]
    return []


_HEADS: dict[type, str] = {}  # "<category>.<type>" of each event class, looked up by name once


def subject_for(event: ev.Event, *, prefix: str) -> str:
    # The sequencer asks this for every entry it appends (two per job or more): the common case,
    # a job whose namespace and name need no escaping, is one dict lookup and one regex search.
    cls = type(event)
    head = _HEADS.get(cls)
    if head is None:
        category, verb = _NAMES[cls.__name__]
        head = _HEADS[cls] = f"{category}.{verb}"
    job = getattr(event, "job", None) or getattr(event, "preemptor", None)
    if isinstance(job, ev.JobRef):
        namespace, name = job.namespace, job.name
        if namespace and name and _UNSAFE.search(namespace + name) is None:
            return f"{prefix}.{head}.{namespace}.{name}"
    tokens = key_tokens(event)
    return f"{prefix}.{head}.{'.'.join(tokens)}" if tokens else f"{prefix}.{head}"


def inbox_subject(event: ev.Event) -> str:
    return subject_for(event, prefix=INBOX_PREFIX)


def log_subject(event: ev.Event) -> str:
    return subject_for(event, prefix=LOG_PREFIX)


def job_filter(namespace: str, name: str, *, prefix: str = LOG_PREFIX) -> str:
    """Every log subject about one job, for ``nats sub`` / ``nats stream view --subject``."""
    return f"{prefix}.*.*.{escape(namespace)}.{escape(name)}"


def names_by_category() -> dict[str, set[str]]:
    """Every ``<category>`` token of a subject and its ``<type>`` tokens (to check a filter)."""
    out: dict[str, set[str]] = {}
    for category, verb in _NAMES.values():
        out.setdefault(category, set()).add(verb)
    return out


# Producers with an inbox prefix of their own, ``<root>.in.<source>.<category>.<type>…``, and
# the input types each may send. Their NATS users may publish only under that prefix
# (``eventlog.natsauth``), so the subject proves the sender, and the sequencer turns any other
# type from them into ``Rejected`` (``eventlog.wire``): a webhook cannot claim a worker's facts or
# a leader's decision. Subjects without a source token (``<root>.in.<category>…``) come from the
# reconciler's own user (or a server without authorization) and take every input type.
SOURCE_TYPES: dict[str, frozenset[str]] = {
    # admission: a new job, a change to its spec or priority, its deletion
    "webhook": frozenset({"JobSubmitted", "JobUpdated", "JobDeleted"}),
    # a worker cluster's adapter: what happens to the remote copies, liveness, usage, labels
    "worker": frozenset(
        {
            "ClusterHeartbeat",
            "ClusterCapacityReported",
            "ClusterUpdated",
            "RemoteCreated",
            "RemoteAdmitted",
            "RemoteRejected",
            "RemoteEvicted",
            "RemoteFinished",
            "RemoteGone",
        }
    ),
}


def inbox_source(subject: str) -> str | None:
    """The producer an inbox subject names (``<root>.in.<source>.…``), None for the plain layout."""
    tokens = subject.split(".", 3)
    if len(tokens) >= 3 and tokens[1] == "in" and tokens[2] in SOURCE_TYPES:
        return tokens[2]
    return None
