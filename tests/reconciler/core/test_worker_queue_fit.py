"""WorkerQueueFit: through fold and decide, and against a small reference of Kueue's rule."""

from __future__ import annotations

import os

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventlog import events as ev
from reconciler.core import explain
from reconciler.core.inflight import InFlight
from reconciler.core.plugins.workerqueue import queue_fit
from reconciler.core.scratch import job_view
from reconciler.core.workerqueues import worker_queues
from tests.reconciler.core.capacity import GPU, gang, pods
from tests.reconciler.core.harness import Harness, cluster, job, of_type, ref

EXAMPLES = settings(
    max_examples=int(os.environ.get("KD_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def quota(**amounts: int | tuple[int, int | None, int | None, int]) -> dict[str, ev.QuotaFact]:
    """resource=nominal or resource=(nominal, borrowing_limit, lending_limit, used)."""
    out = {}
    for name, value in amounts.items():
        res = GPU if name == "gpu" else name
        if isinstance(value, int):
            out[res] = ev.QuotaFact(nominal=value)
        else:
            nominal, borrow, lend, used = value
            out[res] = ev.QuotaFact(nominal=nominal, borrowing_limit=borrow, lending_limit=lend, used=used)
    return out


def cq(
    name: str, *flavors: tuple[str, dict[str, ev.QuotaFact]], cohort: str | None = None
) -> ev.WorkerQueueFact:
    return ev.WorkerQueueFact(
        name=name, cohort=cohort, flavors=[ev.FlavorFact(name=f, resources=r) for f, r in flavors]
    )


def queues_report(
    cluster_name: str, *queues: ev.WorkerQueueFact, local: dict[str, str]
) -> ev.ClusterCapacityReported:
    return ev.ClusterCapacityReported(
        cluster=cluster_name, full=True, queues=list(queues), local_queues=local
    )


def _nominated(decisions: list[ev.DecisionEvent]) -> list[str]:
    return [c for d in of_type(decisions, ev.Nominated) for c in d.clusters]


def test_a_local_queue_without_quota_is_not_used_though_another_queue_has_room() -> None:
    h = Harness()
    h.inputs(cluster("a", gpu=64), cluster("b", gpu=8))
    h.inputs(
        queues_report(
            "a",
            cq("gpu", ("a100", quota(cpu=64_000, gpu=0))),
            cq("other", ("a100", quota(cpu=64_000, gpu=64))),
            local={"team/default": "gpu", "else/default": "other"},
        ),
        queues_report("b", cq("gpu", ("a100", quota(cpu=64_000, gpu=8))), local={"team/default": "gpu"}),
    )
    decisions = h.feed(gang("train", pods("main", 1, cpu=1000, gpu=8)))
    assert _nominated(decisions) == ["b"]


def test_reasons_name_the_local_queue_and_the_flavor() -> None:
    h = Harness()
    h.inputs(cluster("a", gpu=64))
    h.inputs(queues_report("a", cq("gpu", ("a100", quota(cpu=64_000, gpu=(8, None, None, 6)))), local={}))
    [u] = of_type(h.feed(gang("lost", pods("main", 1, cpu=1000, gpu=8))), ev.Unschedulable)
    assert u.message == "1 cluster: no LocalQueue team/default on worker"
    h.inputs(
        queues_report(
            "a", cq("gpu", ("a100", quota(cpu=64_000, gpu=(8, None, None, 6)))), local={"team/q": "gpu"}
        )
    )
    [u] = of_type(h.feed(gang("short", pods("main", 1, cpu=1000, gpu=8), queue="q")), ev.Unschedulable)
    assert u.message == "1 cluster: ClusterQueue gpu on worker: needs 8 nvidia.com/gpu, 2 left in flavor a100"
    [u] = of_type(h.feed(gang("mem", pods("main", 1, cpu=1000, memory=1 << 30), queue="q")), ev.Unschedulable)
    assert u.message == "1 cluster: ClusterQueue gpu on worker has no quota for memory"


def test_the_second_flavor_and_cohort_borrowing_are_used() -> None:
    h = Harness()
    h.inputs(cluster("a", gpu=64))
    h.inputs(
        queues_report(
            "a",
            cq(
                "mine",
                ("a100", quota(gpu=(2, None, None, 0))),
                ("h100", quota(gpu=(4, 2, None, 0))),
                cohort="c",
            ),
            cq("lender", ("h100", quota(gpu=(8, None, 3, 0))), cohort="c"),
            local={"team/default": "mine"},
        )
    )
    # 4 own + 2 borrowed (the limit) in h100: 6 fits, 7 does not.
    assert _nominated(h.feed(gang("six", pods("main", 1, gpu=6)))) == ["a"]
    [u] = of_type(h.feed(gang("seven", pods("main", 1, gpu=1))), ev.Unschedulable)
    assert "ClusterQueue mine on worker: needs 1 nvidia.com/gpu" in u.message  # the six are in flight


def test_copies_in_flight_count_until_admitted_then_the_worker_reports_them() -> None:
    h = Harness()
    h.inputs(cluster("a", gpu=64))
    h.inputs(queues_report("a", cq("gpu", ("f", quota(gpu=8))), local={"team/default": "gpu"}))
    # In one pass: the first takes 6 of 8, the second does not fit what is left.
    decisions = h.feed(gang("one", pods("main", 1, gpu=6)), gang("two", pods("main", 1, gpu=6)))
    assert [d.job.name for d in of_type(decisions, ev.Nominated)] == ["one"]
    # In a later pass, from the folded state: still in flight.
    [u] = of_type(h.feed(gang("three", pods("main", 1, gpu=6))), ev.Unschedulable)
    assert "2 left in flavor f" in u.message
    # Admitted: Kueue counts it (the next report says so), we no longer do.
    [nom] = of_type(decisions, ev.Nominated)
    h.inputs(ev.RemoteAdmitted(job=nom.job, cluster="a", attempt=nom.attempt))
    h.inputs(
        queues_report("a", cq("gpu", ("f", quota(gpu=(8, None, None, 6)))), local={"team/default": "gpu"})
    )
    h.step()
    flight = _flight(h)
    assert flight is not None and flight.entries == {}


def _flight(h: Harness) -> InFlight | None:
    from reconciler.core.scratch import Scratch

    return Scratch.start(h.state).in_flight()


# ---- against a reference ------------------------------------------------------------------------

RESOURCES = ("cpu", GPU)
quota_st = st.tuples(
    st.integers(0, 8),
    st.one_of(st.none(), st.integers(0, 6)),
    st.one_of(st.none(), st.integers(0, 6)),
    st.integers(0, 10),
)
flavor_st = st.tuples(
    st.sampled_from(["a", "b"]), st.dictionaries(st.sampled_from(RESOURCES), quota_st, min_size=1, max_size=2)
)
cq_st = st.tuples(
    st.one_of(st.none(), st.just("c")),
    st.lists(flavor_st, min_size=1, max_size=2, unique_by=lambda f: f[0]),
    st.booleans(),
)


def reference(
    queues: dict[str, ev.WorkerQueueFact],
    name: str,
    demand: dict[str, int],
    flight: dict[str, dict[str, int]],
) -> bool:
    """Kueue's flavor assignment, written plainly: per resource group (flavors listing the same
    resources), the first flavor with room for every requested resource it lists."""
    me = queues[name]
    if me.stopped:
        return False
    wanted = {r: v for r, v in demand.items() if v > 0}
    if any(not any(r in f.resources for f in me.flavors) for r in wanted):
        return False

    def room(f: ev.FlavorFact, r: str) -> int:
        q = f.resources[r]
        used = q.used + flight.get(name, {}).get(r, 0)
        own = max(0, q.nominal - used)
        if me.cohort is None:
            return own
        pool = 0
        for m in queues.values():
            if m.cohort != me.cohort:
                continue
            for g in m.flavors:
                if g.name != f.name or r not in g.resources:
                    continue
                mq = g.resources[r]
                lend = mq.nominal if mq.lending_limit is None else min(mq.lending_limit, mq.nominal)
                if m.name != name:
                    pool += max(0, min(lend, mq.nominal - mq.used))
                pool -= max(0, mq.used - mq.nominal)
        limit = 1 << 60 if q.borrowing_limit is None else q.borrowing_limit
        return own + min(max(0, limit - max(0, used - q.nominal)), max(0, pool))

    groups: dict[tuple[str, ...], list[ev.FlavorFact]] = {}
    for f in me.flavors:
        groups.setdefault(tuple(sorted(f.resources)), []).append(f)
    for flavors in groups.values():
        touched = [r for r in wanted if r in flavors[0].resources]
        if touched and not any(all(room(f, r) >= wanted[r] for r in touched) for f in flavors):
            return False
    return True


@EXAMPLES
@given(
    specs=st.lists(cq_st, min_size=1, max_size=3),
    target=st.integers(0, 2),
    cpu=st.integers(0, 10),
    gpu=st.integers(0, 10),
    flight=st.tuples(st.integers(0, 4), st.integers(0, 4)),
)
def test_queue_fit_matches_the_reference(
    specs: list[
        tuple[str | None, list[tuple[str, dict[str, tuple[int, int | None, int | None, int]]]], bool]
    ],
    target: int,
    cpu: int,
    gpu: int,
    flight: tuple[int, int],
) -> None:
    queues = {
        f"q{i}": ev.WorkerQueueFact(
            name=f"q{i}",
            cohort=cohort,
            stopped=stopped and i == 2,
            flavors=[
                ev.FlavorFact(
                    name=fname,
                    resources={
                        r: ev.QuotaFact(nominal=n, borrowing_limit=b, lending_limit=le, used=u)
                        for r, (n, b, le, u) in res.items()
                    },
                )
                for fname, res in flavors
            ],
        )
        for i, (cohort, flavors, stopped) in enumerate(specs)
    }
    name = f"q{min(target, len(specs) - 1)}"
    h = Harness()
    h.inputs(cluster("w", cpu=1000, gpu=1000))
    h.inputs(queues_report("w", *queues.values(), local={"team/default": name}))
    h.inputs(gang("j", pods("main", 1, cpu=cpu, gpu=gpu)))
    table = h.state.clusters
    view = job_view(h.state, h.state.jobs["team/j"])
    arrays = worker_queues(table)
    in_flight = InFlight()
    in_flight.add(
        ("x", "w", 1),
        slot=0,
        local_queue="team/default",
        demand=table.vector({"cpu": flight[0], GPU: flight[1]}),
    )
    codes, _ = queue_fit(view, arrays, table.resources.names, in_flight)
    demand = {"cpu": cpu, GPU: gpu}
    expected = reference(queues, name, demand, {name: {"cpu": flight[0], GPU: flight[1]}})
    assert (int(codes[0]) == 0) == expected


def test_explain_does_not_count_the_jobs_own_copy_in_flight() -> None:
    from reconciler.core import explain

    h = Harness()
    h.inputs(cluster("a", gpu=64))
    h.inputs(queues_report("a", cq("gpu", ("f", quota(gpu=8))), local={"team/default": "gpu"}))
    assert _nominated(h.feed(gang("one", pods("main", 1, gpu=6)))) == ["a"]
    [verdict] = explain(h.state, "team/one").clusters
    assert verdict.feasible, verdict.rejections


def test_a_queue_report_rebuilds_only_its_workers_rows() -> None:
    h = Harness()
    h.inputs(cluster("a", gpu=64), cluster("b", gpu=64))
    h.inputs(
        queues_report("a", cq("gpu", ("f", quota(gpu=8))), local={"team/default": "gpu"}),
        queues_report("b", cq("gpu", ("f", quota(gpu=8))), local={"team/default": "gpu"}),
    )
    worker_queues(h.state.clusters)
    _, blocks = h.state.clusters.derived["queue_blocks"]
    a, b = blocks.by_slot[0], blocks.by_slot[1]
    h.inputs(queues_report("b", cq("gpu", ("f", quota(gpu=(8, None, None, 3)))), local={"team/default": "gpu"}))
    arrays = worker_queues(h.state.clusters)
    assert blocks.by_slot[0] is a and blocks.by_slot[1] is not b
    assert arrays.used[:, h.state.clusters.resources.index[GPU]].tolist() == [0, 3]
    assert arrays.cq_of("team/default").tolist() == [0, 1]


def test_a_full_worker_queue_is_waited_for_not_preempted_on() -> None:
    """Victims are chosen by the totals they free; which worker ClusterQueue and flavor their
    quota sits in is not known, so evicting them cannot be shown to make room in the job's."""
    h = Harness()
    h.inputs(cluster("w", gpu=8))
    for i in range(4):
        pin = ev.Placement(cluster_names=["w"])
        [n] = of_type(h.feed(job(f"small-{i}", placement=pin, gpu=2, priority=10)), ev.Nominated)
        h.feed(ev.RemoteAdmitted(job=ref(f"small-{i}"), cluster="w", attempt=n.attempt))
    full = quota(gpu=(8, 0, None, 8), cpu=(100_000, 0, None, 4_000))  # the four small jobs' usage
    h.inputs(queues_report("w", cq("gpu", ("a100", full)), local={"team/default": "gpu"}))
    urgent = msgspec.structs.replace(gang("train", pods("main", 1, cpu=1000, gpu=8)), priority=100)
    decisions = h.feed(urgent)
    assert not of_type(decisions, ev.PreemptionClaimed)
    assert not of_type(decisions, ev.Evict)
    assert of_type(decisions, ev.Unschedulable)
    [verdict] = explain(h.state, "team/train").clusters
    assert ("WorkerQueueFit", "UNSCHEDULABLE") in [(r.plugin, r.code) for r in verdict.rejections]
