"""Jobs with one spec share one copy of it (reconciler.core.intern), and the table forgets what no
job uses any more. Sharing changes objects, never values: the snapshot round trip and the
replay checks elsewhere hold with it on."""

from __future__ import annotations

import gc

from eventlog import events as ev
from reconciler.core import dump_state, load_state
from reconciler.core.intern import Interner
from tests.reconciler.core.harness import Harness

GPU = "nvidia.com/gpu"


def job(name: str, namespace: str = "team", *, gpu: int = 1, region: str = "eu") -> ev.JobSubmitted:
    return ev.JobSubmitted(
        job=ev.JobRef(namespace=namespace, name=name, uid=f"uid-{name}"),
        pod_sets=[ev.PodSet(name="main", count=2, requests={"cpu": 1000, GPU: gpu})],
        placement=ev.Placement(
            cluster_selector={"region": region},
            cluster_tolerations=[ev.Toleration(key=GPU, operator="Exists", effect="NoSchedule")],
        ),
        queue="user-queue",
        cluster_queue="cq",
    )


def test_jobs_of_one_spec_share_it_as_decoded_from_the_log() -> None:
    h = Harness()  # every entry is decoded from its encoding: each brings its own copies
    h.inputs(job("a"), job("b"), job("c", namespace="other"), job("d", gpu=2))
    a, b, c, d = (h.state.jobs[k] for k in ("team/a", "team/b", "other/c", "team/d"))
    for field in ("placement", "pod_sets", "demand", "spec_key", "queue", "cluster_queue"):
        assert getattr(a, field) is getattr(b, field), field
    assert a.ref.namespace is b.ref.namespace and a.ref is not b.ref
    # Another namespace: another spec key, the same placement and pods.
    assert c.spec_key != a.spec_key and c.placement is a.placement and c.pod_sets is a.pod_sets
    # Other pods: their own pods and demand, the same placement.
    assert d.pod_sets is not a.pod_sets and d.demand == {"cpu": 2000, GPU: 4} and d.placement is a.placement
    assert a.demand == {"cpu": 2000, GPU: 2}


def test_a_restored_state_shares_too_and_dumps_the_same() -> None:
    h = Harness()
    h.inputs(job("a"), job("b"))
    raw = dump_state(h.state)
    restored = load_state(raw)
    a, b = restored.jobs["team/a"], restored.jobs["team/b"]
    assert a.pod_sets is b.pod_sets and a.spec_key is b.spec_key and a.placement is b.placement
    assert a.key == "team/a" and a.key is next(iter(restored.jobs))
    # The indexes hold the record's own key, not a string decoded again, and one time per batch.
    assert next(iter(restored.waiting)) is a.key and a.submitted_at_ms is b.submitted_at_ms
    assert dump_state(restored) == raw


def test_purge_forgets_only_what_no_record_holds() -> None:
    interner = Interner()
    kept = job("kept", gpu=1, region="eu")
    # What a record holds: the spec's parts (not the spec tuple), its reasons, its strings.
    placement, pod_sets, demand, key = interner.spec(kept.job, kept.placement, kept.pod_sets, kept.queue)
    reasons = interner.reasons({"QuotaExceeded": 3})
    namespace = interner.string("-".join(["kept", "namespace"]))
    dropped = job("dropped", gpu=7, region="us")
    interner.spec(dropped.job, dropped.placement, dropped.pod_sets, dropped.queue)
    interner.reasons({"Unschedulable": 9})
    interner.string("-".join(["dropped", "namespace"]))  # built: no code object holds it
    del dropped  # the event's own objects became the canonical ones
    gc.collect()
    before = len(interner)
    interner.purge()
    # The dropped job's spec, placement, pods, reasons and string are gone; the kept ones stay.
    assert len(interner) == before - 5
    again = interner.spec(kept.job, kept.placement, kept.pod_sets, kept.queue)
    assert all(x is y for x, y in zip(again, (placement, pod_sets, demand, key), strict=True))
    assert interner.reasons({"QuotaExceeded": 3}) is reasons
    assert interner.string("kept-namespace") is namespace
    assert len(interner) == before - 5


def test_equal_specs_with_dicts_in_another_order_are_not_merged() -> None:
    interner = Interner()
    a = job("a")
    b = ev.JobSubmitted(
        job=a.job,
        pod_sets=[ev.PodSet(name="main", count=2, requests={GPU: 1, "cpu": 1000})],
        placement=a.placement,
    )
    one = interner.spec(a.job, a.placement, a.pod_sets, None)
    two = interner.spec(b.job, b.placement, b.pod_sets, None)
    assert one.placement is two.placement
    assert one.pod_sets is not two.pod_sets and list(two.pod_sets[0].requests) == [GPU, "cpu"]
