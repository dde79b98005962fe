"""The fold's shortcuts keep the values the long way gives: the cluster table's assumed usage
updated in place equals the arrays built from its records, and an interned spec is the same
whether the pod sets come as a list or a tuple, and never the event's own list; the per-type
table fold dispatches on agrees with the transition table and the log's decision types."""

from __future__ import annotations

import importlib

import numpy as np

from eventlog import events as ev
from reconciler.core import transitions
from reconciler.core.clusters import ClusterRecord, ClusterTable
from reconciler.core.intern import Interner, spec_key
from tests.reconciler.core.test_transitions import EXAMPLES

GPU = "nvidia.com/gpu"
fold_module = importlib.import_module("reconciler.core.fold")  # (the package exports the function)


def _rebuilt(table: ClusterTable) -> ClusterTable:
    again = ClusterTable()
    for record in table.records:
        again.upsert(ClusterRecord(name=record.name, capacity=dict(record.capacity), assumed=dict(record.assumed)))
    again.build()
    return again


def test_assumed_usage_added_in_place_equals_the_arrays_built_from_the_records() -> None:
    table = ClusterTable()
    for name in ("a", "b", "c"):
        table.upsert(ClusterRecord(name=name, capacity={"cpu": 10_000, "memory": 1 << 30, GPU: 8}))
    table.build()
    table.add_assumed(1, {"cpu": 3000, GPU: 2}, sign=+1)
    table.add_assumed(1, {"memory": 1 << 20}, sign=+1)
    table.add_assumed(2, {"cpu": 500}, sign=+1)
    table.add_assumed(1, {"cpu": 3000, GPU: 2}, sign=-1)
    assert table.records[1].assumed == {"memory": 1 << 20}
    again = _rebuilt(table)
    assert table.resources.names == again.resources.names
    assert np.array_equal(table.assumed, again.assumed)
    assert table.assumed[1].tolist() == [0, 1 << 20, 0] and table.assumed[2].tolist() == [500, 0, 0]


def test_a_resource_new_to_the_table_rebuilds_the_arrays_with_it() -> None:
    table = ClusterTable()
    table.upsert(ClusterRecord(name="a", capacity={"cpu": 10_000}))
    table.build()
    table.add_assumed(0, {"cpu": 1000, "example.com/fpga": 1}, sign=+1)
    table.build()
    assert table.resources.names == ["cpu", "example.com/fpga"]
    assert table.assumed[0].tolist() == [1000, 1]


def _job(pods: list[ev.PodSet]) -> ev.JobSubmitted:
    return ev.JobSubmitted(
        job=ev.JobRef(namespace="team", name="a", uid="u-a"),
        pod_sets=pods,
        placement=ev.Placement(cluster_selector={"region": "eu"}),
        queue="user-queue",
    )


def test_an_interned_spec_is_one_for_a_list_or_a_tuple_of_pod_sets_and_not_the_events_list() -> None:
    interner = Interner()
    e = _job([ev.PodSet(name="main", count=2, requests={"cpu": 1000, GPU: 1})])
    spec = interner.spec(e.job, e.placement, e.pod_sets, e.queue)
    assert spec.spec_key == spec_key(e.job, e.placement, e.pod_sets, e.queue)
    assert spec.pod_sets == e.pod_sets and spec.pod_sets is not e.pod_sets  # records never hold the event's
    assert spec.demand == {"cpu": 2000, GPU: 2}
    again = _job([ev.PodSet(name="main", count=2, requests={"cpu": 1000, GPU: 1})])
    assert interner.spec(again.job, again.placement, tuple(again.pod_sets), again.queue) is spec
    plain = Interner(enabled=False).spec(e.job, e.placement, e.pod_sets, e.queue)
    assert plain.spec_key == spec.spec_key and plain.pod_sets is not e.pod_sets


def test_fold_takes_each_events_job_and_decision_flag_as_the_transition_table_and_the_log_do() -> None:
    """``fold`` looks up once per type what it does with an entry: it must name the job
    ``transitions.TABLE`` names, and call a decision what the log calls one."""
    j, other = ev.JobRef(namespace="team", name="j", uid="u-j"), ev.JobRef(namespace="team", name="p", uid="u-p")
    examples = {kind: make(j, "c", 1) for kind, make in EXAMPLES.items()}
    # An Evict names its preemptor too: it is about its victim.
    examples[ev.Evict] = ev.Evict(job=j, cluster="c", attempt=1, preemptor=other)
    for kind, event in examples.items():
        _, job_handler, decision, field, submitted = fold_module._HOW[kind]
        assert decision == ev.is_decision(event), kind.__name__
        assert submitted == (kind is ev.JobSubmitted), kind.__name__
        entry = transitions.TABLE[kind]
        if job_handler is None:
            continue
        if isinstance(entry, transitions.JobEvent):
            assert getattr(event, field) == entry.job(event), kind.__name__
        else:  # not a lifecycle event (a claim ends): the one job it names
            refs = [f for f in kind.__struct_fields__ if isinstance(getattr(event, f), ev.JobRef)]
            assert refs == [field], kind.__name__
