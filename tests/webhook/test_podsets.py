"""Pod sets and per-pod requests, checked by hand against KINDS.md for each kind."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventlog.events import PodSet
from eventlog.kube import kinds
from webhook import podsets

GI, MI = 2**30, 2**20


def _sets(api_version: str, kind: str, *, obj: dict[str, Any]) -> list[PodSet]:
    info = kinds.lookup_api_version(api_version, kind)
    assert info is not None
    return podsets.pod_sets(info, {"apiVersion": api_version, "kind": kind, **obj})


def _c(name: str, *, requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "busybox", "resources": resources, **extra}


def test_job_count_is_min_of_parallelism_and_completions_and_limits_fill_requests() -> None:
    job = {
        "metadata": {"name": "j", "annotations": {"kueue.x-k8s.io/job-min-parallelism": "1"}},
        "spec": {
            "parallelism": 3,
            "completions": 2,
            "template": {
                "spec": {
                    "containers": [
                        _c("a", requests={"cpu": "500m", "memory": "1Gi"}),
                        _c("b", requests={"cpu": "250m"}, limits={"cpu": "1"}),  # requests win over limits
                        _c("c", requests=None, limits={"memory": "512Mi"}),  # limits stand in for missing requests
                    ]
                }
            },
        },
    }
    assert _sets("batch/v1", "Job", obj=job) == [
        PodSet(name="main", count=2, requests={"cpu": 750, "memory": GI + 512 * MI}, min_count=1)
    ]


@pytest.mark.parametrize(
    ("spec", "count"),
    [({}, 1), ({"completions": 5}, 1), ({"parallelism": 4}, 4), ({"parallelism": 0, "completions": 3}, 0)],
)
def test_job_count_defaults(spec: dict[str, Any], count: int) -> None:
    job = {"spec": {**spec, "template": {"spec": {"containers": [_c("a", requests={"cpu": 1})]}}}}
    assert _sets("batch/v1", "Job", obj=job)[0].count == count


def test_jobset_one_set_per_replicated_job() -> None:
    def rj(name: str, replicas: int, parallelism: int, completions: int, requests: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": name,
            "replicas": replicas,
            "template": {
                "spec": {
                    "parallelism": parallelism,
                    "completions": completions,
                    "template": {"spec": {"containers": [_c("m", requests=requests)]}},
                }
            },
        }

    js = {"spec": {"replicatedJobs": [rj("leader", 1, 1, 1, {"cpu": 1}), rj("workers", 2, 4, 4, {"cpu": 2, "nvidia.com/gpu": 1})]}}
    assert _sets("jobset.x-k8s.io/v1alpha2", "JobSet", obj=js) == [
        PodSet(name="leader", count=1, requests={"cpu": 1000}),
        PodSet(name="workers", count=8, requests={"cpu": 2000, "nvidia.com/gpu": 1}),
    ]


def _ray_cluster_spec(**extra: Any) -> dict[str, Any]:
    return {
        "headGroupSpec": {"template": {"spec": {"containers": [_c("head", requests={"cpu": "1", "memory": "2Gi"})]}}},
        "workerGroupSpecs": [
            {"groupName": "small", "replicas": 2, "numOfHosts": 2, "template": {"spec": {"containers": [_c("w", requests={"cpu": 1})]}}},
            {"groupName": "unset", "template": {"spec": {"containers": [_c("w", requests={"cpu": 1})]}}},
        ],
        **extra,
    }


def test_rayjob_with_the_default_submitter() -> None:
    rayjob = {"spec": {"entrypoint": "python x.py", "rayClusterSpec": _ray_cluster_spec()}}
    assert _sets("ray.io/v1", "RayJob", obj=rayjob) == [
        PodSet(name="head", count=1, requests={"cpu": 1000, "memory": 2 * GI}),
        PodSet(name="small", count=4, requests={"cpu": 1000}),  # replicas x numOfHosts
        PodSet(name="unset", count=0, requests={"cpu": 1000}),  # the CRD defaults replicas to 0
        PodSet(name="submitter", count=1, requests={"cpu": 500, "memory": 200 * MI}),
    ]


def test_rayjob_sidecar_mode_puts_the_submitter_in_the_head() -> None:
    rayjob = {"spec": {"submissionMode": "SidecarMode", "rayClusterSpec": _ray_cluster_spec()}}
    sets = _sets("ray.io/v1", "RayJob", obj=rayjob)
    assert [s.name for s in sets] == ["head", "small", "unset"]
    assert sets[0].requests == {"cpu": 1500, "memory": 2 * GI + 200 * MI}


def test_raycluster_autoscaler_and_gcs_fault_tolerance() -> None:
    rc = {
        "metadata": {"annotations": {"ray.io/ft-enabled": "true"}},
        "spec": {
            "enableInTreeAutoscaling": True,
            "headGroupSpec": {"template": {"spec": {"containers": [_c("head", requests={"cpu": "100m", "memory": "1Gi"})]}}},
        },
    }
    # head: max(100m, 200m) + autoscaler 500m; memory max(1Gi, 256Mi) + 512Mi
    assert _sets("ray.io/v1", "RayCluster", obj=rc) == [PodSet(name="head", count=1, requests={"cpu": 700, "memory": GI + 512 * MI})]


def test_a_ray_worker_group_may_not_be_called_head() -> None:
    rc = {"spec": {"headGroupSpec": {"template": {"spec": {}}}, "workerGroupSpecs": [{"groupName": "head", "template": {"spec": {}}}]}}
    with pytest.raises(podsets.PodSetError) as err:
        _sets("ray.io/v1", "RayCluster", obj=rc)
    assert err.value.path == "$.spec.workerGroupSpecs[0].template.spec"
    assert "'head' is used twice (also at $.spec.headGroupSpec.template.spec)" in err.value.message


def test_rayjob_on_an_existing_cluster_is_not_dispatchable() -> None:
    with pytest.raises(podsets.NotDispatchable):
        _sets("ray.io/v1", "RayJob", obj={"spec": {"clusterSelector": {"ray.io/cluster": "c"}}})


def test_pytorchjob_sets_in_the_fixed_order() -> None:
    pj = {
        "spec": {
            "pytorchReplicaSpecs": {
                "Worker": {"replicas": 3, "template": {"spec": {"containers": [_c("pytorch", requests={"cpu": 4})]}}},
                "Master": {"template": {"spec": {"containers": [_c("pytorch", requests={"cpu": 2})]}}},
            }
        }
    }
    assert _sets("kubeflow.org/v1", "PyTorchJob", obj=pj) == [
        PodSet(name="master", count=1, requests={"cpu": 2000}),
        PodSet(name="worker", count=3, requests={"cpu": 4000}),
    ]


SIDECAR_POD = {
    "containers": [_c("main", requests={"cpu": "1", "memory": "1Gi"})],
    "initContainers": [
        _c("init1", requests={"cpu": "2", "memory": "100Mi"}),
        _c("sidecar", requests={"cpu": "500m", "memory": "200Mi"}, restartPolicy="Always"),
        _c("init2", requests={"cpu": "1", "memory": "2Gi"}),
    ],
}


def test_sidecars_add_and_init_containers_max() -> None:
    # containers + sidecar = 1.5 cpu, 1Gi+200Mi; init1 alone = 2 cpu; init2 + running sidecar =
    # 1.5 cpu, 2Gi+200Mi. Per key max: cpu 2, memory 2Gi+200Mi.
    assert _sets("v1", "Pod", obj={"metadata": {"name": "p"}, "spec": SIDECAR_POD}) == [
        PodSet(name="main", count=1, requests={"cpu": 2000, "memory": 2 * GI + 200 * MI})
    ]


def test_appwrapper_drops_restart_policy_so_sidecars_are_plain_init_containers() -> None:
    aw = {
        "metadata": {"name": "aw"},
        "spec": {
            "components": [
                {
                    "template": {"apiVersion": "v1", "kind": "Pod", "spec": SIDECAR_POD},
                    "podSets": [{"replicas": 2, "path": "template"}],
                }
            ]
        },
    }
    # Without sidecars: containers 1 cpu / 1Gi; inits max 2 cpu / 2Gi.
    assert _sets("workload.codeflare.dev/v1beta2", "AppWrapper", obj=aw) == [
        PodSet(name="aw-0", count=2, requests={"cpu": 2000, "memory": 2 * GI})
    ]


def test_overhead_is_added() -> None:
    pod = {"spec": {"containers": [_c("main", requests={"cpu": "1", "memory": "1Gi"})], "overhead": {"cpu": "250m", "memory": "120Mi"}}}
    assert _sets("v1", "Pod", obj=pod)[0].requests == {"cpu": 1250, "memory": GI + 120 * MI}


def test_pod_level_resources_override_cpu_and_memory_only() -> None:
    pod = {
        "spec": {
            "resources": {"requests": {"cpu": "4"}, "limits": {"memory": "8Gi"}},
            "containers": [_c("main", requests={"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"})],
        }
    }
    assert _sets("v1", "Pod", obj=pod)[0].requests == {"cpu": 4000, "memory": 8 * GI, "nvidia.com/gpu": 1}


def test_sub_milli_amounts_are_summed_before_rounding() -> None:
    pod = {"spec": {"containers": [_c("a", requests={"cpu": "500u"}), _c("b", requests={"cpu": "500u"})]}}
    assert _sets("v1", "Pod", obj=pod)[0].requests == {"cpu": 1}


def test_workload_pod_sets() -> None:
    wl = {"spec": {"podSets": [{"name": "a", "count": 3, "minCount": 2, "template": {"spec": {"containers": [_c("m", requests={"cpu": 1})]}}}]}}
    assert _sets("kueue.x-k8s.io/v1beta1", "Workload", obj=wl) == [PodSet(name="a", count=3, requests={"cpu": 1000}, min_count=2)]


def test_trainjob_counts_trainer_nodes() -> None:
    tj = {"spec": {"trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}}}}}
    assert _sets("trainer.kubeflow.org/v1alpha1", "TrainJob", obj=tj) == [PodSet(name="node", count=2, requests={"nvidia.com/gpu": 1})]


def test_plain_pod_group_counts_the_whole_group() -> None:
    pod = {
        "metadata": {"labels": {"kueue.x-k8s.io/pod-group-name": "g"}, "annotations": {"kueue.x-k8s.io/pod-group-total-count": "4"}},
        "spec": {"containers": [_c("m", requests={"cpu": 1})]},
    }
    assert _sets("v1", "Pod", obj=pod) == [PodSet(name="main", count=4, requests={"cpu": 1000})]


@pytest.mark.parametrize(
    ("api_version", "kind", "obj", "path", "fragment"),
    [
        (
            "kubeflow.org/v1",
            "PyTorchJob",
            {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": "two"}}}},
            "$.spec.pytorchReplicaSpecs.Worker.replicas",
            "non-negative integer",
        ),
        (
            "batch/v1",
            "Job",
            {"spec": {"template": {"spec": {"containers": [_c("a", requests={"cpu": "1x"})]}}}},
            "$.spec.template.spec.containers[0].resources.requests.cpu",
            "not a quantity",
        ),
        ("batch/v1", "Job", {"spec": []}, "$.spec", "expected an object"),
        (
            "batch/v1",
            "Job",
            {"metadata": {"annotations": {"kueue.x-k8s.io/job-min-parallelism": "zero"}}, "spec": {}},
            "$.metadata.annotations['kueue.x-k8s.io/job-min-parallelism']",
            "positive integer",
        ),
        (
            "trainer.kubeflow.org/v1alpha1",
            "TrainJob",
            {"spec": {"trainer": {"resourcesPerNode": {"limits": {"nvidia.com/gpu": "one"}}}}},
            "$.spec.trainer.resourcesPerNode.limits['nvidia.com/gpu']",
            "not a quantity",
        ),
        (
            "ray.io/v1",
            "RayCluster",
            {"spec": {"workerGroupSpecs": [{"groupName": "w", "numOfHosts": "2"}]}},
            "$.spec.workerGroupSpecs[0].numOfHosts",
            "expected a non-negative integer, found '2'",
        ),
        (
            "batch/v1",
            "Job",
            {"metadata": {"annotations": {"a": "b", "kueue.x-k8s.io/job-min-parallelism": 2}}, "spec": {}},
            "$.metadata.annotations['kueue.x-k8s.io/job-min-parallelism']",
            "expected a string, found 2",
        ),
    ],
)
def test_errors_name_the_path(api_version: str, kind: str, obj: dict[str, Any], path: str, fragment: str) -> None:
    with pytest.raises(podsets.PodSetError) as err:
        _sets(api_version, kind, obj=obj)
    assert err.value.path == path
    assert fragment in err.value.message


# ---- properties ------------------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.text(max_size=6) | st.sampled_from(["1", "500m", "2Gi", "x"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["spec", "template", "containers", "resources", "requests", "limits", "cpu", "replicas", "parallelism", "completions", "replicatedJobs", "name", "initContainers", "restartPolicy", "headGroupSpec", "workerGroupSpecs", "podSets", "components", "path", "count"]), inner, max_size=4),
    max_leaves=25,
)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(kinds.SUPPORTED_KINDS), _json)
def test_any_object_gives_pod_sets_or_a_located_error(info: kinds.KindInfo, spec: object) -> None:
    try:
        sets = podsets.pod_sets(info, {"apiVersion": info.api_version, "kind": info.kind, "metadata": {"name": "x"}, "spec": spec})
    except podsets.PodSetError as err:
        assert err.path.startswith("$")
        return
    except podsets.NotDispatchable:
        return
    for s in sets:
        assert s.count >= 0 and all(isinstance(v, int) and v >= 0 for v in s.requests.values())


_millis = st.integers(0, 4000)


def _container(cpu: int, *, sidecar: bool = False) -> dict[str, object]:
    c: dict[str, object] = {"name": "c", "resources": {"requests": {"cpu": f"{cpu}m"}}}
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


@settings(max_examples=300, deadline=None)
@given(st.lists(_millis, min_size=1, max_size=4), st.lists(st.tuples(_millis, st.booleans()), max_size=4), _millis)
def test_the_request_rule_in_order(containers: list[int], inits: list[tuple[int, bool]], overhead: int) -> None:
    """KINDS.md's rule for one resource, step by step: sidecars run alongside everything after
    them, a regular init container runs alone with the sidecars started before it."""
    spec = {
        "containers": [_container(c) for c in containers],
        "initContainers": [_container(c, sidecar=side) for c, side in inits],
        "overhead": {"cpu": f"{overhead}m"},
    }
    peaks, running = [], 0
    for cpu, side in inits:
        if side:
            running += cpu
            peaks.append(running)
        else:
            peaks.append(cpu + running)
    expected = max([sum(containers) + running, *peaks]) + overhead
    assert _sets("v1", "Pod", obj={"spec": spec})[0].requests.get("cpu", 0) == expected


# ---- a decoding error names a place that is in the object ------------------------------------

_QUANTITIES = st.sampled_from(["1", "500m", "1Gi", "0.5", "2k", "1e3", 3, 0, "bad", "-1", None, [1], True])
_AMOUNTS = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "hugepages-2Mi"]), _QUANTITIES, max_size=3)
_RESOURCES = st.one_of(st.none(), st.just("x"), st.fixed_dictionaries({}, optional={"requests": st.one_of(_AMOUNTS, st.just([])), "limits": _AMOUNTS}))
_CONTAINER = st.one_of(
    st.just(7),
    st.fixed_dictionaries({}, optional={"resources": _RESOURCES, "restartPolicy": st.sampled_from(["Always", "Never", 1])}),
)
_POD_SPEC = st.fixed_dictionaries(
    {},
    optional={
        "containers": st.one_of(st.lists(_CONTAINER, max_size=3), st.just({})),
        "initContainers": st.lists(_CONTAINER, max_size=3),
        "resources": _RESOURCES,
        "overhead": st.one_of(_AMOUNTS, st.just("x")),
        "priorityClassName": st.sampled_from(["high", 5]),
    },
)
_LABELS = st.dictionaries(st.sampled_from(["kueue.x-k8s.io/pod-group-name", "app"]), st.sampled_from(["g", 3, None]), max_size=2)
_META = st.fixed_dictionaries(
    {},
    optional={
        "name": st.sampled_from(["p", 5]),
        "labels": st.one_of(_LABELS, st.just([])),
        "annotations": st.one_of(_LABELS, st.sampled_from([{"kueue.x-k8s.io/pod-group-total-count": "2"}, {"kueue.x-k8s.io/pod-group-total-count": "x"}])),
        "ownerReferences": st.lists(st.fixed_dictionaries({}, optional={"controller": st.sampled_from([True, "yes"])}), max_size=2),
    },
)


def _at(obj: Any, path: str) -> Any:
    """The value at a JSON path as messages write it: ``$.a.b[0]['c.d/e']``."""
    assert path.startswith("$"), path
    node, rest = obj, path[1:]
    while rest:
        if rest.startswith("['"):
            key, _, rest = rest[2:].partition("']")
            node = node[key]
        elif rest.startswith("["):
            index, _, rest = rest[1:].partition("]")
            node = node[int(index)]
        else:
            assert rest.startswith("."), (path, rest)
            key = rest[1:].split(".")[0].split("[")[0]
            rest = rest[1 + len(key) :]
            node = node[key]
    return node


@settings(max_examples=300, deadline=None)
@given(meta=_META, spec=_POD_SPEC)
def test_every_error_names_a_place_in_the_object(meta: dict[str, Any], spec: dict[str, Any]) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    info = kinds.lookup_api_version("v1", "Pod")
    assert info is not None
    try:
        sets = podsets.pod_sets(info, pod)
    except podsets.PodSetError as err:
        found = _at(pod, err.path)  # raises if the path is not in the object
        if "found" in err.message and not isinstance(found, (dict, list)):
            assert err.message.endswith(f"found {found!r}"), (err.message, found)
        return
    assert [s.name for s in sets] == ["main"]


@pytest.mark.parametrize(
    ("spec", "path", "message"),
    [
        ({"containers": [{"resources": {"requests": []}}]}, "$.spec.containers[0].resources.requests", "expected an object, found list"),
        ({"initContainers": [{"restartPolicy": 1}]}, "$.spec.initContainers[0].restartPolicy", "expected a string, found 1"),
        ({"containers": [7]}, "$.spec.containers[0]", "expected an object, found 7"),
        ({"overhead": {"cpu": [1]}}, "$.spec.overhead.cpu", "[1] is not a quantity"),
    ],
)
def test_pod_spec_errors_in_words(spec: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(podsets.PodSetError) as err:
        _sets("v1", "Pod", obj={"spec": spec})
    assert err.value.path == path
    assert err.value.message.startswith(message)
