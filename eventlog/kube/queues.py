"""Which queue a job goes to, and at what priority: Kueue's admission rules, pure.

``resolve`` takes the queue configuration (``QueuesConfigured``), the job's namespace, its
``kueue.x-k8s.io/queue-name`` label and its priority class, and answers ``Resolved`` (the
LocalQueue, its ClusterQueue, the priority value) or ``Denied`` (a reason code and a message a
user can act on: what is wrong, where, did-you-mean, and the fix). The webhook denies with it at
admission; the manager watcher's backfill uses it to fill ``JobSubmitted.cluster_queue``.

Rules (Kueue's, except where noted):

- No queue label: the namespace's LocalQueue named ``default`` (Kueue's LocalQueueDefaulting
  convention), else denied.
- The LocalQueue must exist in the job's namespace, and its ClusterQueue's ``namespaceSelector``
  must select the namespace. Kubernetes LabelSelector semantics; a nil selector selects nothing,
  an empty one everything. A namespace's labels are those of its Namespace object in the config,
  plus ``kubernetes.io/metadata.name``, which Kubernetes sets on every namespace (Kueue's own
  examples select on it). Kueue leaves a non-matching workload pending forever; kdispatch denies.
- The priority class, when the job names one, must be a WorkloadPriorityClass of the config and,
  beyond Kueue, one the ClusterQueue allows (``allowed_priority_classes``; None = any), so a team
  cannot give itself the top class. No class: priority 0, as Kueue gives a workload without a
  WorkloadPriorityClass or PriorityClass.
- A stopped LocalQueue or ClusterQueue (``stopPolicy`` Hold/HoldAndDrain) still accepts jobs, as
  in Kueue: they wait until it is resumed. ``Resolved.warnings`` says so.

No I/O, no clock: the same inputs give the same answer (replay and the backfill rely on it).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from eventlog.events import (
    ClusterQueueSpec,
    LabelRequirement,
    LabelSelector,
    LocalQueueSpec,
    QueuesConfigured,
)
from eventlog.kube.names import PRIORITY_CLASS_LABEL, QUEUE_LABEL

DEFAULT_QUEUE = "default"  # Kueue's LocalQueueDefaulting: the LocalQueue a job without the label goes to
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set by Kubernetes on every Namespace
ALLOWED_CLASSES_ANNOTATION = "kdispatch.io/allowed-priority-classes"  # where a ClusterQueue lists them

DenyReason = Literal[
    "queue-not-found",
    "no-default-queue",
    "cluster-queue-not-found",
    "namespace-not-selected",
    "priority-class-not-found",
    "priority-class-not-allowed",
]


@dataclass(frozen=True, slots=True)
class Resolved:
    local_queue: str
    cluster_queue: str
    priority: int  # the WorkloadPriorityClass's value; 0 without a class
    priority_class: str | None
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Denied:
    reason: DenyReason
    message: str


def resolve(
    config: QueuesConfigured,
    *,
    namespace: str,
    queue_name: str | None,
    priority_class: str | None,
    priority_source: str = f"label {PRIORITY_CLASS_LABEL}",
    kind: str = "job",
) -> Resolved | Denied:
    """The queue and priority of a job in ``namespace``. ``priority_source`` and ``kind`` only
    word the messages (where the class was read, what was submitted)."""
    queue = _local_queue(config, namespace=namespace, queue_name=queue_name, kind=kind)
    if isinstance(queue, Denied):
        return queue
    cq = _cluster_queue(config, queue.cluster_queue)
    if cq is None:
        return Denied(
            "cluster-queue-not-found",
            f"kdispatch: LocalQueue {_q(queue.name)} in namespace {_q(namespace)} points to ClusterQueue "
            f"{_q(queue.cluster_queue)}, which does not exist in the queue configuration ({_source(config)}). "
            f"{_other_usable(config, namespace, but=queue.name)}Ask the platform team to fix the LocalQueue's spec.clusterQueue.",
        )
    labels = namespace_labels(config, namespace)
    if not selector_matches(cq.namespace_selector, labels):
        return Denied(
            "namespace-not-selected",
            f"kdispatch: LocalQueue {_q(queue.name)} in namespace {_q(namespace)} belongs to ClusterQueue {_q(cq.name)}, "
            f"whose namespaceSelector {_describe_selector(cq.namespace_selector)} does not select namespace "
            f"{_q(namespace)} (its labels: {_describe_labels(labels)}). "
            f"{_other_usable(config, namespace, but=queue.name)}Ask the platform team to add the namespace to the "
            f"ClusterQueue's namespaceSelector, or to label the namespace so that it matches.",
        )
    value = check_priority(config, cq, priority_class=priority_class, source=priority_source, local_queue=queue)
    if isinstance(value, Denied):
        return value
    return Resolved(
        local_queue=queue.name,
        cluster_queue=cq.name,
        priority=value,
        priority_class=priority_class,
        warnings=_stopped(queue, cq),
    )


def check_priority(
    config: QueuesConfigured,
    cq: ClusterQueueSpec | None,
    *,
    priority_class: str | None,
    source: str = f"label {PRIORITY_CLASS_LABEL}",
    local_queue: LocalQueueSpec | None = None,
) -> int | Denied:
    """The value of ``priority_class`` for a job of ClusterQueue ``cq`` (None: only check that the
    class exists), or why it may not use it."""
    if priority_class is None:
        return 0
    classes = config.priority_classes
    if priority_class not in classes:
        known = sorted(classes)
        hint = _did_you_mean(priority_class, known)
        listing = f"The WorkloadPriorityClasses are {_names(known)}." if known else "There are none in the queue configuration."
        return Denied(
            "priority-class-not-found",
            f"kdispatch: priority class {_q(priority_class)} ({source}) is not a WorkloadPriorityClass{hint}. {listing} "
            f"Use one of them, or name none (priority 0).",
        )
    allowed = cq.allowed_priority_classes if cq is not None else None
    if allowed is not None and priority_class not in allowed:
        where = f"ClusterQueue {_q(cq.name)}" if cq is not None else "the ClusterQueue"
        if local_queue is not None:
            where += f" (of LocalQueue {_q(local_queue.namespace + '/' + local_queue.name)})"
        usable = f"it allows {_names(sorted(allowed))}: use one of them, or name none (priority 0)" if allowed else (
            "it allows none: remove the priority class (priority 0)"
        )
        return Denied(
            "priority-class-not-allowed",
            f"kdispatch: {where} does not allow priority class {_q(priority_class)} ({source}); {usable}. "
            f"To allow it, ask the platform team to add it to the ClusterQueue's {ALLOWED_CLASSES_ANNOTATION} annotation.",
        )
    return classes[priority_class]


def effective_queue_name(queue_name: str | None) -> str:
    """The LocalQueue a job is submitted to: its label, else ``default``."""
    return queue_name if queue_name else DEFAULT_QUEUE


def cluster_queue_of(config: QueuesConfigured, *, namespace: str, queue_name: str | None) -> str | None:
    """The ClusterQueue a job's LocalQueue points to, or None when it does not resolve. For the
    backfill of jobs the webhook missed: those were admitted (or denied) without the webhook, so
    nothing is denied here; the priority is not checked (the job carries it already)."""
    queue = _local_queue(config, namespace=namespace, queue_name=queue_name, kind="job")
    if isinstance(queue, Denied):
        return None
    cq = _cluster_queue(config, queue.cluster_queue)
    if cq is None or not selector_matches(cq.namespace_selector, namespace_labels(config, namespace)):
        return None
    return cq.name


# ---- label selectors -----------------------------------------------------------------------------


def namespace_labels(config: QueuesConfigured, namespace: str) -> dict[str, str]:
    """The namespace's labels as a selector sees them: its Namespace object's, plus the name label
    Kubernetes sets on every namespace (a Namespace object in the config cannot override it)."""
    return {**config.namespaces.get(namespace, {}), NAMESPACE_NAME_LABEL: namespace}


def selector_matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """Kubernetes LabelSelector semantics: every matchLabels pair AND every requirement. ``None``
    (Kueue's nil namespaceSelector) selects nothing; ``LabelSelector()`` selects everything."""
    if selector is None:
        return False
    if any(labels.get(key) != value for key, value in selector.match_labels.items()):
        return False
    return all(requirement_matches(r, labels) for r in selector.match_expressions)


def requirement_matches(requirement: LabelRequirement, labels: Mapping[str, str]) -> bool:
    present = requirement.key in labels
    if requirement.operator == "In":
        return present and labels[requirement.key] in requirement.values
    if requirement.operator == "NotIn":  # as in Kubernetes: a namespace without the key matches
        return not present or labels[requirement.key] not in requirement.values
    if requirement.operator == "Exists":
        return present
    return not present  # DoesNotExist


# ---- lookups -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Index:
    cluster_queues: dict[str, ClusterQueueSpec]
    local_queues: dict[str, list[LocalQueueSpec]]  # namespace -> its LocalQueues by name


_last: tuple[QueuesConfigured, _Index] | None = None


def _index(config: QueuesConfigured) -> _Index:
    """Lookups by name, built once per config (the webhook resolves every review against the same
    one): a memo of a pure function, so answers do not depend on it."""
    global _last
    last = _last
    if last is not None and last[0] is config:
        return last[1]
    by_namespace: dict[str, list[LocalQueueSpec]] = {}
    for lq in config.local_queues:
        by_namespace.setdefault(lq.namespace, []).append(lq)
    index = _Index(
        cluster_queues={cq.name: cq for cq in config.cluster_queues},
        local_queues={ns: sorted(lqs, key=lambda lq: lq.name) for ns, lqs in by_namespace.items()},
    )
    _last = (config, index)
    return index


def _cluster_queue(config: QueuesConfigured, name: str) -> ClusterQueueSpec | None:
    return _index(config).cluster_queues.get(name)


def _queues_in(config: QueuesConfigured, namespace: str) -> list[LocalQueueSpec]:
    return _index(config).local_queues.get(namespace, [])


def _usable(config: QueuesConfigured, namespace: str) -> list[str]:
    """The LocalQueues of ``namespace`` a job there can use (their ClusterQueue selects it)."""
    labels = namespace_labels(config, namespace)
    out = []
    for lq in _queues_in(config, namespace):
        cq = _cluster_queue(config, lq.cluster_queue)
        if cq is not None and selector_matches(cq.namespace_selector, labels):
            out.append(lq.name)
    return out


def _local_queue(config: QueuesConfigured, *, namespace: str, queue_name: str | None, kind: str) -> LocalQueueSpec | Denied:
    name = effective_queue_name(queue_name)
    here = _queues_in(config, namespace)
    found = next((lq for lq in here if lq.name == name), None)
    if found is not None:
        return found
    usable = _usable(config, namespace)
    if not queue_name:
        if usable:
            fix = f"Add the label {QUEUE_LABEL}: <one of {_names(usable)}>"
        else:
            fix = f"Submit it in a namespace that has a LocalQueue, or ask the platform team to add one to namespace {_q(namespace)}"
        return Denied(
            "no-default-queue",
            f"kdispatch: this {kind} has no {QUEUE_LABEL} label and namespace {_q(namespace)} has no LocalQueue "
            f"named {_q(DEFAULT_QUEUE)} to take it. {fix}, or ask the platform team to add a LocalQueue named "
            f"{_q(DEFAULT_QUEUE)} in namespace {_q(namespace)}.",
        )
    if here:
        hint = _did_you_mean(name, [lq.name for lq in here])
        listing = f"Its LocalQueues: {_names([lq.name for lq in here])}."
        fix = f"Set the label {QUEUE_LABEL} to one of {_names(usable)}." if usable else (
            "None of them admits this namespace: ask the platform team."
        )
        return Denied(
            "queue-not-found",
            f"kdispatch: there is no LocalQueue {_q(name)} in namespace {_q(namespace)} (label {QUEUE_LABEL}){hint}. "
            f"{listing} {fix}",
        )
    # Nothing in this namespace: maybe the job was meant for another one.
    hint = ""
    close = _closest(name, sorted({lq.name for lq in config.local_queues}))
    if close is not None:
        where = _in_namespaces(sorted({lq.namespace for lq in config.local_queues if lq.name == close}))
        hint = f"; did you mean {_q(close)} ({where})?" if close != name else f"; there is one {where}"
    return Denied(
        "queue-not-found",
        f"kdispatch: namespace {_q(namespace)} has no LocalQueue, so there is none named {_q(name)} "
        f"(label {QUEUE_LABEL}){hint}. Submit the {kind} in a namespace that has LocalQueues, or ask the platform "
        f"team to add a LocalQueue named {_q(name)} in namespace {_q(namespace)}.",
    )


def _other_usable(config: QueuesConfigured, namespace: str, *, but: str) -> str:
    usable = [name for name in _usable(config, namespace) if name != but]
    if not usable:
        return ""
    return f"Set the label {QUEUE_LABEL} to one that does: {_names(usable)}; or "


def _stopped(queue: LocalQueueSpec, cq: ClusterQueueSpec) -> tuple[str, ...]:
    out = []
    if queue.stop_policy != "None":
        out.append(f"LocalQueue {_q(queue.namespace + '/' + queue.name)} is stopped (stopPolicy {queue.stop_policy})")
    if cq.stop_policy != "None":
        out.append(f"ClusterQueue {_q(cq.name)} is stopped (stopPolicy {cq.stop_policy})")
    if not out:
        return ()
    return (f"kdispatch: {' and '.join(out)}: the job is accepted and waits until the platform team resumes it",)


# ---- wording -------------------------------------------------------------------------------------


def _q(name: str) -> str:
    return f'"{name}"'


def _names(names: Iterable[str]) -> str:
    return ", ".join(_q(n) for n in names)


def _did_you_mean(found: str, options: Sequence[str]) -> str:
    """``; did you mean "x"?`` for a case-insensitive match or the closest spelling, else ``""``."""
    close = _closest(found, options)
    return f"; did you mean {_q(close)}?" if close is not None else ""


def _closest(found: str, options: Sequence[str]) -> str | None:
    for option in options:
        if option.lower() == found.lower():
            return option
    lowered = {o.lower(): o for o in options}
    close = difflib.get_close_matches(found.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[close[0]] if close else None


def _in_namespaces(namespaces: Sequence[str]) -> str:
    return f"in namespace{'s' if len(namespaces) > 1 else ''} {_names(namespaces)}"


def _describe_labels(labels: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}"


def _describe_selector(selector: LabelSelector | None) -> str:
    if selector is None:
        return "(none: it selects no namespace, as in Kueue)"
    parts = [f"{k}={v}" for k, v in sorted(selector.match_labels.items())]
    for r in selector.match_expressions:
        if r.operator in ("In", "NotIn"):
            parts.append(f"{r.key} {r.operator.lower()} ({', '.join(r.values)})")
        else:
            parts.append(r.key if r.operator == "Exists" else f"!{r.key}")
    return "{" + ", ".join(parts) + "}" if parts else "{}"


def _source(config: QueuesConfigured) -> str:
    return config.source or "no source recorded"
