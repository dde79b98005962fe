"""Workers with real nodes (``simulate --workers``): pods bound to nodes, node facts reported,
and the wasted placements the totals-only model causes and the node model avoids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eventlog import events as ev
from reconciler.cli import main
from reconciler.simulate.nodes import node_workers, sample_nodes, split
from reconciler.simulate.readers import load_trace
from reconciler.simworker import NodePool, SimNode, SimWorker
from tests.paths import TRACES

GPU = "alibaba.com/gpu-milli"
GIB = 1024**3
ALIBABA = TRACES / "alibaba-gpu-v2023"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"


def node(name: str, gpus: int, **labels: str) -> SimNode:
    return SimNode(name=name, allocatable={"cpu": 32_000, "memory": 128 * GIB, GPU: gpus * 1000}, labels=labels)


def pods(count: int, gpus: int, **kw: object) -> ev.PodSet:
    return ev.PodSet(name="main", count=count, requests={"cpu": 1000, GPU: gpus * 1000}, **kw)  # type: ignore[arg-type]


def test_an_eight_gpu_pod_does_not_fit_eight_one_gpu_nodes_but_eight_one_gpu_pods_do() -> None:
    pool = NodePool([node(f"n{i}", 1) for i in range(8)])
    assert not pool.fits([pods(1, 8)])
    assert pool.place([pods(8, 1)], key=("gang", 1))
    assert sorted(pool.bound_nodes(("gang", 1))) == [f"n{i}" for i in range(8)]
    assert not pool.fits([pods(1, 1)])  # all taken
    pool.release(("gang", 1))
    assert pool.fits([pods(1, 1)])


def test_a_gang_binds_all_its_pods_or_none() -> None:
    pool = NodePool([node("a", 4), node("b", 4)])
    assert not pool.place([pods(3, 3)], key=("g", 1))  # two pods of 3 GPUs fit, the third does not
    assert (pool.free == pool.allocatable).all()


def test_least_allocated_spreads_and_most_allocated_packs() -> None:
    spread, packed = NodePool([node("a", 4), node("b", 4)]), NodePool([node("a", 4), node("b", 4)], scoring="MostAllocated")
    for i in range(2):
        spread.place([pods(1, 1)], key=(f"j{i}", 1))
        packed.place([pods(1, 1)], key=(f"j{i}", 1))
    assert [spread.bound_nodes((f"j{i}", 1)) for i in range(2)] == [["a"], ["b"]]
    assert [packed.bound_nodes((f"j{i}", 1)) for i in range(2)] == [["a"], ["a"]]
    assert spread.fits([pods(1, 4)]) is False and packed.fits([pods(1, 4)]) is True


def test_node_selector_and_affinity_choose_the_nodes() -> None:
    pool = NodePool([node("t4", 8, model="T4"), node("v100", 8, model="V100")])
    term = ev.SelectorTerm(match_expressions=[ev.MatchExpression(key="model", operator="In", values=["V100"])])
    assert pool.place([pods(1, 8, node_affinity=[term])], key=("a", 1))
    assert pool.bound_nodes(("a", 1)) == ["v100"]
    assert not pool.fits([pods(1, 1, node_selector={"model": "V100"})])


def test_the_worker_reports_its_nodes_then_only_what_changed() -> None:
    worker = SimWorker(
        "w", {GPU: 8000}, nodes=[node("a", 4, model="T4"), node("b", 4, model="V100")], admission_latency_ms=1000
    )
    job = ev.JobRef(namespace="t", name="j", uid="u-j")
    worker.create(job, 1, [pods(1, 1, node_selector={"model": "V100"})], 0, 10_000, 0)
    first = [f for f in worker.advance(0) if isinstance(f, ev.ClusterCapacityReported)]
    assert [(r.full, [g.id for g in r.node_groups]) for r in first] == [(True, ["model=T4", "model=V100"])]
    facts = worker.advance(worker.next_event_ms() or 0)
    admitted = [f for f in facts if isinstance(f, ev.RemoteAdmitted)]
    (change,) = [f for f in facts if isinstance(f, ev.ClusterCapacityReported)]
    assert admitted and not change.full
    assert [(g.id, [(b.count, b.free[GPU]) for b in g.bins]) for g in change.node_groups] == [("model=V100", [(1, 3000)])]
    # Free capacity is rounded down (cpu to 100m): the core never sees room that is not there.
    assert change.node_groups[0].bins[0].free["cpu"] == 31_000


def test_totals_only_workers_report_no_node_facts() -> None:
    worker = SimWorker("w", {GPU: 4000}, nodes=[node("a", 4)], report_nodes=False)
    assert not [f for f in worker.advance(0) if isinstance(f, ev.ClusterCapacityReported)]


def test_nodes_are_sampled_evenly_and_split_in_order() -> None:
    nodes = [node(f"n{i}", 1) for i in range(10)]
    assert [n.name for n in sample_nodes(nodes, 0.3)] == ["n3", "n6", "n9"]
    assert [[n.name for n in part] for part in split(nodes[:5], 2)] == [["n0", "n1"], ["n2", "n3", "n4"]]


def test_the_alibaba_node_list_split_into_workers() -> None:
    trace, left_out = node_workers(load_trace(ALIBABA), workers=4, scale=0.0085)
    assert [c.name for c in trace.clusters] == ["worker-1", "worker-2", "worker-3", "worker-4"]
    assert sum(len(c.nodes) for c in trace.clusters) == 10
    assert trace.total_capacity(GPU) == 50_000
    assert left_out == len(load_trace(ALIBABA).jobs) - len(trace.jobs) > 0
    assert all(c.labels["kdispatch.io/nodes"] == str(len(c.nodes)) for c in trace.clusters)


def test_too_many_workers_for_the_nodes_kept_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--trace", str(ALIBABA), "--workers", "20", "--limit", "5", "--quiet"]) == 2
    assert "keeps 10 of the 1213 nodes, fewer than --workers 20" in capsys.readouterr().err


def fragmented_trace(folder: Path) -> Path:
    """Two workers of two 4-GPU, 32-core nodes. Four 1-GPU pods of 20 cores arrive first and run
    until t=1000 s: one per node, whichever worker gets them. Then, at t=10 s, a 4-GPU pod: every
    worker has 6 GPUs free in total, no node has 4 until the small pods end."""
    folder.mkdir()
    (folder / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(f"n{i},32000,131072,4,A\n" for i in range(4))
    )
    rows = [f"small-{i},20000,1024,1,1000,,LS,Running,{i},1000,{i}\n" for i in range(4)]
    rows.append("big,1000,1024,4,1000,,LS,Running,10,1110,10\n")
    path = folder / "openb_pod_list_default.csv"
    path.write_text(POD_HEADER + "".join(rows))
    return path


def test_node_facts_stop_wasted_placements_on_a_fragmented_fleet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = fragmented_trace(tmp_path / "trace")
    out = tmp_path / "out"
    argv = ["simulate", "--trace", str(trace), "--workers", "2", "--capacity-scale", "1", "--capacity-model", "both",
            "--out", str(out), "--quiet"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    doc = json.loads((out / "results.json").read_text())
    assert doc["settings"]["capacity_models"] == ["totals", "nodes"] and doc["settings"]["nodes"] == 4
    names = ["multikueue", "all-at-once", "incremental-3", "topk-1", "topk-2"]
    assert list(doc["profiles"]) == [f"{n}@{m}" for n in names for m in ("totals", "nodes")]
    for name in names:
        totals, nodes = doc["profiles"][f"{name}@totals"], doc["profiles"][f"{name}@nodes"]
        # Without node facts the 4-GPU pod is sent where the totals have room and waits there.
        assert (totals["wasted_placements"]["count"], totals["wasted_placements"]["share_pct"]) == (1, 20.0), name
        # With them it waits in the dispatcher until a node has room, then goes there: one
        # admission latency (1 s) later than a copy already waiting on that worker.
        assert nodes["wasted_placements"]["count"] == 0, name
        assert nodes["wait_p95_s"] <= totals["wait_p95_s"] + 1.0, name
        assert nodes["finished"] == totals["finished"] == 5
        assert nodes["remote_copies"] < totals["remote_copies"]
    assert "floor topk-1: wasted placements 0.0% with node facts (<= 1%; 20.0% with totals only)" in printed
    # Deterministic: the same command prints the same tables.
    assert main(argv) == 0
    assert capsys.readouterr().out == printed


def test_the_real_time_adapter_publishes_node_facts_with_their_own_message_ids() -> None:
    """``SimCluster`` (demo/serve) passes the model's capacity reports on; a retry of one report
    has the same id, a later report another."""
    import asyncio

    from reconciler.service.clusters.simulated import SimCluster

    published: list[tuple[str, str]] = []

    class Inbox:
        async def report(self, event: ev.InputEvent, *, msg_id: str) -> None:
            published.append((type(event).__name__, msg_id))

    now = [5_000]
    cluster = SimCluster(SimWorker("w", {GPU: 4000}, nodes=[node("a", 4)]), clock=lambda: now[0])
    facts = cluster.model.advance(now[0])
    asyncio.run(cluster._report(Inbox(), facts))
    asyncio.run(cluster._report(Inbox(), facts))
    assert published[0] == published[1] and published[0][0] == "ClusterCapacityReported"
    assert published[0][1].startswith("cap/w/5000/")


def test_a_placement_is_wasted_only_when_the_worker_kept_it_past_the_round_timeout() -> None:
    from reconciler.simulate.wasted import WastedPlacements

    wasted = WastedPlacements(round_timeout_ms=60_000)
    refs = {n: ev.JobRef(namespace="t", name=n, uid=f"u-{n}") for n in ("fast", "lost-race", "timed-out", "late")}
    seq = iter(range(1, 100))

    def at(ms: int, event: ev.AnyEvent) -> None:
        wasted.observe(ev.LogEntry(seq=next(seq), at_ms=ms, event=event))

    for ref in refs.values():
        at(0, ev.Nominated(job=ref, clusters=["a", "b"], attempt=1))
    at(1_000, ev.RemoteAdmitted(job=refs["fast"], cluster="a", attempt=1))
    at(1_000, ev.Withdrawn(job=refs["fast"], cluster="b", attempt=1))  # lost the race: not counted
    at(2_000, ev.RemoteAdmitted(job=refs["lost-race"], cluster="b", attempt=1))
    at(2_000, ev.Withdrawn(job=refs["lost-race"], cluster="a", attempt=1))
    at(60_000, ev.Withdrawn(job=refs["timed-out"], cluster="a", attempt=1))  # at the timeout: wasted
    at(60_000, ev.Withdrawn(job=refs["timed-out"], cluster="b", attempt=1))
    at(61_000, ev.RemoteAdmitted(job=refs["late"], cluster="a", attempt=1))  # after it: wasted
    at(61_000, ev.Withdrawn(job=refs["late"], cluster="b", attempt=1))
    assert wasted.results() == {
        "count": 2, "share_pct": 50.0, "copies": 4, "jobs_sent": 4, "round_timeout_s": 60.0,
    }


def test_a_job_only_totals_think_fits_does_not_keep_the_run_going_for_ever() -> None:
    """Two 4-GPU nodes, totals 8 GPUs, one 8-GPU pod, workers reporting totals only: TopK sends it
    round and round. Nothing runs and nothing else will happen, so the run ends after the idle
    horizon with the job unfinished (``simulate.nodes`` leaves such jobs out of real traces)."""
    from reconciler.simulate.profiles import PolicyDefaults, default_profiles
    from reconciler.simulate.runner import CoreApi
    from reconciler.simulate.session import run_profile
    from reconciler.simulate.trace import Trace, TraceCluster, TraceJob

    nodes = [node("a", 4), node("b", 4)]
    cluster = TraceCluster(name="w", capacity={"cpu": 64_000, "memory": 256 * GIB, GPU: 8000}, nodes=nodes,
                           report_nodes=False)
    job = TraceJob(name="big", submit_ms=0, runtime_ms=1000, pod_sets=[pods(1, 8)])
    trace = Trace(jobs=[job], clusters=[cluster], gpu_resource=GPU)
    topk = next(p for p in default_profiles() if p.name == "topk-1")
    res = run_profile(trace, profile=topk, settings=PolicyDefaults(), core=CoreApi.real()).results
    assert res["unfinished"] == 1 and res["placed"] == 0
    assert res["wasted_placements"]["count"] == 1 and res["wasted_placements"]["copies"] > 10
