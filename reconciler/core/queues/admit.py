"""Which ClusterQueue a job is in, and whether (in which flavors) its queue can admit it now."""

from __future__ import annotations

from dataclasses import dataclass

from eventlog.events import Resources
from reconciler.core.jobs import Charge, JobRecord
from reconciler.core.queues.tree import QueueTree
from reconciler.core.queues.usage import Usage


@dataclass(frozen=True)
class Wait:
    """Why a job's queue does not admit it: ``key`` is stable (Unschedulable reasons, dedup),
    ``message`` has today's numbers."""

    key: str
    message: str
    # Whether freeing quota could help (False: the config itself rules the job out).
    quota: bool = True


@dataclass(frozen=True)
class Assignment:
    flavors: dict[str, str]  # resource -> flavor
    amounts: list[tuple[int, int]]  # (column, amount)

    def charge(self, tree: QueueTree, cluster_queue: str) -> Charge:
        return Charge(
            cluster_queue=cluster_queue,
            amounts=[(tree.columns[col][0], tree.columns[col][1], amount) for col, amount in self.amounts],
        )


def queue_of(tree: QueueTree, job: JobRecord) -> int | Wait:
    """The job's ClusterQueue node: the one the webhook resolved, else its LocalQueue's."""
    name = job.cluster_queue
    ns = job.ref.namespace
    if name is None:
        local = job.queue or "default"
        lq = tree.local_queues.get((ns, local))
        if lq is None:
            return Wait(
                key=f"NoLocalQueue: {ns}/{local}",
                message=f"no LocalQueue {local!r} in namespace {ns!r}"
                + ("" if job.queue else " (the job names no queue: label it kueue.x-k8s.io/queue-name)"),
                quota=False,
            )
        name = lq.cluster_queue
    node = tree.queue.get(name)
    if node is None:
        return Wait(key=f"NoClusterQueue: {name}", message=f"ClusterQueue {name} no longer exists", quota=False)
    return node


def hold_reason(tree: QueueTree, job: JobRecord, node: int) -> Wait | None:
    """stopPolicy Hold/HoldAndDrain on the ClusterQueue or the job's LocalQueue."""
    spec = tree.nodes[node].spec
    if spec is not None and spec.stop_policy != "None":
        return Wait(
            key=f"Held: ClusterQueue {spec.name}",
            message=f"ClusterQueue {spec.name} is stopped (stopPolicy {spec.stop_policy}): no new admissions",
            quota=False,
        )
    if job.cluster_queue is None or job.queue is not None:
        lq = tree.local_queues.get((job.ref.namespace, job.queue or "default"))
        if lq is not None and lq.stop_policy != "None":
            return Wait(
                key=f"Held: LocalQueue {lq.namespace}/{lq.name}",
                message=f"LocalQueue {lq.namespace}/{lq.name} is stopped (stopPolicy {lq.stop_policy}): no new admissions",
                quota=False,
            )
    return None


def draining(tree: QueueTree, job: JobRecord) -> str:
    """Why the job's queue evicts it (stopPolicy HoldAndDrain), or ""."""
    node = queue_of(tree, job)
    if not isinstance(node, int):
        return ""
    held = hold_reason(tree, job, node)
    if held is None or "HoldAndDrain" not in held.message:
        return ""
    return held.message.replace("no new admissions", "draining what it admitted")


def assign(usage: Usage, node: int, demand: Resources) -> Assignment | Wait:
    """In each resource group the first flavor (in order) where the job fits, within nominal
    quota or by borrowing; a resource no group covers makes the job inadmissible (as Kueue)."""
    stamp = usage.stamp(node)
    waited = _waited(usage, node, demand, stamp)
    if waited is not None:
        return waited
    got = _assign_planned(usage, node, demand)
    if isinstance(got, Wait):
        if len(usage.waits) >= _WAITS:  # (the state's own usage lives on: its facts ask too)
            usage.waits.clear()
        usage.waits[(node, id(demand))] = (demand, stamp, got)  # (the demand held: its id stays its own)
    return got


_WAITS = 4_096  # waits kept per usage object (cleared when full)


def _waited(usage: Usage, node: int, demand: Resources, stamp: tuple[int, ...]) -> Wait | None:
    """The answer ``assign`` gave a demand of the node's when neither the node's usage nor any
    of its cohorts' has changed since (a queue that is full turns every job of a spec away with
    the same reason until usage moves). Only waits are kept: an ``Assignment``'s dict is the
    caller's to keep."""
    got = usage.waits.get((node, id(demand)))
    if got is not None and got[0] is demand and got[1] == stamp:
        return got[2]
    return None


def _assign_planned(usage: Usage, node: int, demand: Resources) -> Assignment | Wait:
    plan = _plan(usage.tree, node, demand)
    if plan is None:
        return _assign(usage, node, demand)
    flavors: dict[str, str] = {}
    amounts: list[tuple[int, int]] = []
    for wanted, options in plan:
        first: tuple[str, int, int] | None = None
        for flavor, pairs in options:
            short: tuple[int, int] | None = None
            for col, amount in pairs:
                if amount > usage.available(node, col):
                    short = (col, amount)
                    break
            if short is None:
                for r in wanted:
                    flavors[r] = flavor
                amounts.extend(pairs)
                break
            if first is None:
                first = (flavor, *short)
        else:
            assert first is not None  # (a group no flavor covers has no plan)
            return _short(usage, node, *first)
    return Assignment(flavors=flavors, amounts=sorted(amounts))


def admits(usage: Usage, node: int, demand: Resources, available: dict[int, int]) -> bool:
    """Whether ``assign`` admits the demand (not a ``Wait``), without working out its answer:
    no reason, no message, and the node's ``Usage.available`` per column asked once for all the
    demands checked against one usage (``available``: the caller's memo for this node, valid
    only while the usage does not change). A pass asks it for every demand of a cohort with
    quota news before it dispatches."""
    plan = _plan(usage.tree, node, demand)
    if plan is None:
        return not isinstance(_assign(usage, node, demand), Wait)
    for _, options in plan:
        for _, pairs in options:
            for col, amount in pairs:
                room = available.get(col)
                if room is None:
                    room = available[col] = usage.available(node, col)
                if amount > room:
                    break
            else:
                break  # this flavor covers the group
        else:
            return False
    return True


# Per resource group the job needs: the resources it wants there, and each flavor that covers
# them all with its (column, amount) pairs, in the order they are tried.
_Plan = list[tuple[list[str], list[tuple[str, list[tuple[int, int]]]]]]
_PLANS = 4_096  # plans kept per tree (cleared when full)


def _plan(tree: QueueTree, node: int, demand: Resources) -> _Plan | None:
    """What ``_assign`` works out from the tree and the demand alone, once per (node, demand);
    None when the answer does not depend on usage (a resource no group or flavor covers:
    ``_assign`` says so). Demands are interned per job spec, so most jobs share one."""
    key = (node, id(demand))
    got = tree.plans.get(key)
    if got is not None and got[0] is demand:
        plan: _Plan | None = got[1]
        return plan
    plan = _make_plan(tree, node, demand)
    if len(tree.plans) >= _PLANS:
        tree.plans.clear()
    tree.plans[key] = (demand, plan)  # (the demand held, so its id is not reused meanwhile)
    return plan


def _make_plan(tree: QueueTree, node: int, demand: Resources) -> _Plan | None:
    n = tree.nodes[node]
    if any(not any(resource in g.covered for g in n.groups) for resource in demand):
        return None
    plan: _Plan = []
    for group in n.groups:
        wanted = [r for r in group.covered if demand.get(r, 0) > 0]
        if not wanted:
            continue
        options = []
        for flavor in group.flavors:
            cols = [(tree.column.get((flavor, r)), demand[r]) for r in wanted]
            if all(col is not None for col, _ in cols):
                options.append((flavor, [(col, amount) for col, amount in cols if col is not None]))
        if not options:
            return None
        plan.append((wanted, options))
    return plan


def _assign(usage: Usage, node: int, demand: Resources) -> Assignment | Wait:
    """``assign`` worked out from scratch (what ``_plan`` memoizes, and its rare answers)."""
    tree = usage.tree
    n = tree.nodes[node]
    flavors: dict[str, str] = {}
    amounts: list[tuple[int, int]] = []
    for resource in sorted(demand):
        if not any(resource in g.covered for g in n.groups):
            return Wait(
                key=f"NotCovered: ClusterQueue {n.name} {resource}",
                message=f"ClusterQueue {n.name} has no quota for {resource} (no resource group covers it)",
                quota=False,
            )
    for group in n.groups:
        wanted = [r for r in group.covered if demand.get(r, 0) > 0]
        if not wanted:
            continue
        first: tuple[str, int, int] | None = None
        for flavor in group.flavors:
            cols = [(tree.column.get((flavor, r)), demand[r]) for r in wanted]
            if any(col is None for col, _ in cols):
                continue
            pairs = [(col, amount) for col, amount in cols if col is not None]
            short = next(((col, amount) for col, amount in pairs if amount > usage.available(node, col)), None)
            if short is None:
                for r in wanted:
                    flavors[r] = flavor
                amounts.extend(pairs)
                break
            if first is None:
                first = (flavor, *short)
        else:
            if first is None:
                return Wait(
                    key=f"NotCovered: ClusterQueue {n.name} {','.join(wanted)}",
                    message=f"no flavor of ClusterQueue {n.name} has quota for all of {', '.join(wanted)}",
                    quota=False,
                )
            return _short(usage, node, *first)
    return Assignment(flavors=flavors, amounts=sorted(amounts))


def _short(usage: Usage, node: int, flavor: str, col: int, amount: int) -> Wait:
    tree = usage.tree
    n = tree.nodes[node]
    resource = tree.columns[col][1]
    used = usage.usage[node][col]
    available = usage.available(node, col)
    local = max(0, n.guaranteed[col] - used) if n.parent is not None else available
    where = f"{resource}" if flavor == "default" else f"{resource} ({flavor})"
    message = f"queue {n.name}: {where} {used + amount}/{n.nominal[col]} nominal"
    if n.parent is not None:
        lend = max(0, available - local)
        message += f", cohort has {lend} to lend"
        limit = n.borrowing_limit[col]
        if limit is not None:
            message += f" (borrowing limit {limit})"
    # The key names no resource: which one runs short first may change as usage grows, and the
    # reason must not (a decide right after its own batch repeats the same Unschedulable).
    return Wait(key=f"QuotaExceeded: ClusterQueue {n.name}", message=message)
