"""NodeFit and TopologyFit against a brute-force packer on small worlds: every fit NodeFit accepts
really packs; for one pod set both are exact."""

from __future__ import annotations

import os

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventlog import events as ev
from reconciler.core.nodes import node_arrays
from reconciler.core.plugins.nodefit import node_fit
from reconciler.core.plugins.topology import topology_fit
from reconciler.core.scratch import job_view
from tests.reconciler.core.capacity import GPU, gang, group, pods, report
from tests.reconciler.core.harness import Harness, cluster

EXAMPLES = settings(
    max_examples=int(os.environ.get("KD_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

RES = ("cpu", GPU)
free_vec = st.tuples(st.integers(0, 8), st.integers(0, 8))
bins_st = st.lists(st.tuples(st.integers(1, 3), free_vec), min_size=1, max_size=3)
pod_set_st = st.tuples(
    st.integers(1, 3), st.integers(0, 3), st.integers(0, 4), st.integers(0, 4)
)  # count, min, cpu, gpu


def packable(nodes: list[tuple[int, int]], sets: list[tuple[int, tuple[int, int]]]) -> bool:
    """Whether ``need`` pods of each set can be placed on the nodes at once (backtracking)."""
    free = [list(n) for n in nodes]
    wanted = [req for need, req in sets for _ in range(need)]
    wanted.sort(key=lambda r: (-r[1], -r[0]))

    def place(i: int) -> bool:
        if i == len(wanted):
            return True
        req = wanted[i]
        tried: set[tuple[int, int]] = set()
        for node in free:
            if node[0] >= req[0] and node[1] >= req[1] and tuple(node) not in tried:
                tried.add((node[0], node[1]))
                node[0] -= req[0]
                node[1] -= req[1]
                if place(i + 1):
                    return True
                node[0] += req[0]
                node[1] += req[1]
        return False

    return place(0)


def verdict(
    rows: list[tuple[int, tuple[int, int]]], sets: list[tuple[int, int, int, int]]
) -> tuple[bool, str]:
    h = Harness()
    h.inputs(cluster("w", cpu=1000, gpu=1000))
    h.inputs(report("w", group("g", *[(count, {"cpu": c, GPU: g}) for count, (c, g) in rows])))
    spec = gang(
        "j",
        *[
            pods(f"s{i}", count, min_count=min(m, count) or None, cpu=c, gpu=g)
            for i, (count, m, c, g) in enumerate(sets)
        ],
    )
    h.inputs(spec)
    table = h.state.clusters
    view = job_view(h.state, h.state.jobs["team/j"])
    codes, reasons = node_fit(view, node_arrays(table), table.resources.names)
    code = int(codes[table.index["w"]])
    return code == 0, reasons[code - 1].message if code else ""


def _needs(sets: list[tuple[int, int, int, int]]) -> list[tuple[int, tuple[int, int]]]:
    return [(min(m, count) or count, (c, g)) for count, m, c, g in sets]


def _nodes(rows: list[tuple[int, tuple[int, int]]]) -> list[tuple[int, int]]:
    return [free for count, free in rows for _ in range(count)]


@EXAMPLES
@given(rows=bins_st, sets=st.lists(pod_set_st, min_size=1, max_size=3))
def test_an_accepted_gang_really_packs(
    rows: list[tuple[int, tuple[int, int]]], sets: list[tuple[int, int, int, int]]
) -> None:
    ok, _ = verdict(rows, sets)
    if ok:
        assert packable(_nodes(rows), _needs(sets)), (rows, sets)


@EXAMPLES
@given(rows=bins_st, one=pod_set_st)
def test_one_pod_set_is_exact(
    rows: list[tuple[int, tuple[int, int]]], one: tuple[int, int, int, int]
) -> None:
    ok, why = verdict(rows, [one])
    assert ok == packable(_nodes(rows), _needs([one])), (rows, one, why)


@EXAMPLES
@given(small=st.integers(1, 7), nodes=st.integers(1, 16))
def test_a_big_pod_never_fits_many_small_nodes(small: int, nodes: int) -> None:
    ok, why = verdict([(nodes, (64, small))], [(1, 0, 1, 8)])
    assert not ok
    assert why == f"no node with 8 {GPU} free (largest: {small})"


def test_brute_force_packer_sanity() -> None:
    assert packable([(8, 1)] * 8, [(1, (1, 1))])
    assert not packable([(8, 1)] * 8, [(1, (1, 8))])
    assert packable([(4, 4), (4, 4)], [(2, (2, 2)), (2, (2, 2))])


@EXAMPLES
@given(
    racks=st.lists(bins_st, min_size=1, max_size=3),
    one=pod_set_st,
)
def test_a_required_topology_level_is_one_domain_holding_the_set(
    racks: list[list[tuple[int, tuple[int, int]]]], one: tuple[int, int, int, int]
) -> None:
    rack = "cloud.provider.com/rack"
    h = Harness()
    h.inputs(cluster("w", cpu=1000, gpu=1000))
    groups = [
        group(f"r{i}", *[(count, {"cpu": c, GPU: g}) for count, (c, g) in rows], labels={rack: f"r{i % 2}"})
        for i, rows in enumerate(racks)
    ]
    h.inputs(report("w", *groups))
    count, m, c, g = one
    ps = msgspec.structs.replace(
        pods("s", count, min_count=min(m, count) or None, cpu=c, gpu=g),
        topology=ev.TopologyRequest(required=rack),
    )
    h.inputs(gang("j", ps))
    view = job_view(h.state, h.state.jobs["team/j"])
    codes, _ = topology_fit(view, node_arrays(h.state.clusters))
    domains: dict[str, list[tuple[int, int]]] = {}
    for i, rows in enumerate(racks):
        domains.setdefault(f"r{i % 2}", []).extend(_nodes(rows))
    expected = any(packable(nodes, _needs([one])) for nodes in domains.values())
    assert (int(codes[0]) == 0) == expected, (racks, one)
