"""Node constraints, topology requests and Workload API gangs of pod sets, through the webhook's HTTP
entry point (``python -m webhook``: /mutate, then /validate, recorded in the inbox), with real
corpus manifests and ones that use the fields the corpus lacks."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import yaml

from eventlog import events as ev
from eventlog.kube import names
from reconciler.service.clusters.backfill import pod_sets_of
from tests.paths import MANIFESTS
from tests.webhook.conftest import Webhook, review
from tests.webhook.test_server import _admit, _inbox, _post
from webhook import jsonpatch

WORKLOAD_ANNOTATION = names.WORKLOAD_ANNOTATION


def _manifest(path: str, *, name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((MANIFESTS / path).read_text())
    meta = doc.setdefault("metadata", {})
    meta.pop("generateName", None)
    meta.update(name=name, namespace="team-a")
    meta.setdefault("labels", {})[names.QUEUE_LABEL] = "user-queue"
    return doc


async def _submitted(webhook: Webhook, nats_url: str, obj: dict[str, Any]) -> ev.JobSubmitted:
    name = obj["metadata"]["name"]
    patched = await _admit(webhook, obj, uid=f"rev-{name}", object_uid=f"obj-{name}")
    records = await _inbox(nats_url, webhook.root, subject=f"{webhook.root}.in.job.submitted.team-a.{name}")
    (event, _), *_ = records
    assert isinstance(event, ev.JobSubmitted)
    # what the manager watcher reads back (a job the webhook missed is recorded from the stamp)
    assert pod_sets_of(patched) == event.pod_sets
    return event


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


async def test_a_kueue_tas_job_carries_its_required_topology(webhook: Webhook, nats_url: str) -> None:
    obj = _manifest("kueue/tas/sample-job-required.yaml", name=_unique("tas"))
    event = await _submitted(webhook, nats_url, obj)
    (main,) = event.pod_sets
    assert main.count == 10
    assert main.topology == ev.TopologyRequest(required="cloud.provider.com/topology-rack")
    assert main.node_selector == {} and main.tolerations == [] and main.group is None


async def test_a_jobset_keeps_each_replicated_jobs_node_selector(webhook: Webhook, nats_url: str) -> None:
    obj = _manifest("jobset/tpu-multislice/v6e-jax-workload.yaml", name=_unique("tpu"))
    event = await _submitted(webhook, nats_url, obj)
    (slices,) = event.pod_sets
    assert slices.count == 8
    assert slices.node_selector == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "4x4",
    }
    assert slices.topology is None


def _gpu_job(name: str, pod_spec_extra: dict[str, Any], *, annotations: dict[str, str] | None = None, parallelism: int = 4) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": {names.QUEUE_LABEL: "user-queue"},
            "annotations": annotations or {},
        },
        "spec": {
            "parallelism": parallelism,
            "template": {
                "metadata": {"annotations": {"kueue.x-k8s.io/podset-preferred-topology": "cloud.example.com/rack"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "m", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
                    **pod_spec_extra,
                },
            },
        },
    }


async def test_selector_required_affinity_tolerations_and_the_workload_gang(webhook: Webhook, nats_url: str) -> None:
    name = _unique("gang")
    workload = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": name},
            "podGroupTemplates": [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 3}}}],
        },
    }
    extra = {
        "nodeSelector": {"nvidia.com/gpu.product": "H100"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "cloud.example.com/rack", "operator": "In", "values": ["r1", "r2"]}]},
                        {"matchExpressions": [{"key": "spare", "operator": "Exists"}]},
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [{"key": "x", "operator": "Exists"}]}}
                ],
            }
        },
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "dedicated", "value": "ml"},
        ],
        "schedulingGroup": {"podGroupName": f"{name}-workers"},  # the PodGroup the Job controller makes
    }
    obj = _gpu_job(name, extra, annotations={WORKLOAD_ANNOTATION: json.dumps(workload)})
    (main,) = (await _submitted(webhook, nats_url, obj)).pod_sets
    assert main == ev.PodSet(
        name="main",
        count=4,
        requests={"nvidia.com/gpu": 8},
        min_count=3,
        node_selector={"nvidia.com/gpu.product": "H100"},
        node_affinity=[
            ev.SelectorTerm(match_expressions=[ev.MatchExpression(key="cloud.example.com/rack", operator="In", values=["r1", "r2"])]),
            ev.SelectorTerm(match_expressions=[ev.MatchExpression(key="spare", operator="Exists")]),
        ],
        tolerations=[
            ev.Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule"),
            ev.Toleration(key="dedicated", value="ml"),
        ],
        topology=ev.TopologyRequest(preferred="cloud.example.com/rack"),
        group="workers",
    )


async def test_a_raycluster_maps_kuberays_pod_group_templates_to_its_worker_groups(webhook: Webhook, nats_url: str) -> None:
    name = _unique("ray")
    obj = _manifest("kuberay/ray-cluster.sample.yaml", name=name)
    (sample,) = obj["spec"]["workerGroupSpecs"]  # the corpus sample: group "workergroup"
    sample["replicas"] = 4
    sample["template"].setdefault("metadata", {})["annotations"] = {
        "kueue.x-k8s.io/podset-required-topology": "cloud.example.com/rack"
    }
    large = json.loads(json.dumps(sample))
    large.update(groupName="large", replicas=2)
    large["template"]["metadata"]["annotations"] = {"kueue.x-k8s.io/podset-required-topology": "cloud.example.com/block"}
    obj["spec"]["workerGroupSpecs"].append(large)
    workload = {  # what KubeRay's workload-aware scheduling makes of it: head basic, a gang per worker group
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "Workload",
        "metadata": {"name": name},
        "spec": {
            "podGroupTemplates": [
                {"name": "head", "schedulingPolicy": {"basic": {}}},
                {"name": "worker-workergroup", "schedulingPolicy": {"gang": {"minCount": 2}}},
                {"name": "worker-large", "schedulingPolicy": {"gang": {"minCount": 2}}},
            ]
        },
    }
    obj["metadata"].setdefault("annotations", {})[WORKLOAD_ANNOTATION] = json.dumps(workload)
    sets = {p.name: p for p in (await _submitted(webhook, nats_url, obj)).pod_sets}
    assert (sets["head"].group, sets["head"].min_count) == ("head", None)  # basic: no gang minimum
    small = sets["workergroup"]
    assert (small.group, small.count, small.min_count) == ("worker-workergroup", 4, 2)
    assert (sets["large"].group, sets["large"].min_count) == ("worker-large", 2)
    # each worker group asks for its own domain: different levels, placed independently
    assert small.topology == ev.TopologyRequest(required="cloud.example.com/rack")
    assert sets["large"].topology == ev.TopologyRequest(required="cloud.example.com/block")


async def test_a_gang_minimum_above_the_pod_count_is_denied_with_where_and_why(webhook: Webhook) -> None:
    name = _unique("bad")
    workload = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "Workload",
        "metadata": {"name": name},
        "spec": {"podGroupTemplates": [{"name": "main", "schedulingPolicy": {"gang": {"minCount": 9}}}]},
    }
    obj = _gpu_job(name, {}, annotations={WORKLOAD_ANNOTATION: json.dumps(workload)})
    status, answer = await _post(webhook, "/mutate", body=review(obj, uid=f"m-{name}"))
    assert status == 200 and not answer["response"]["allowed"]
    message = answer["response"]["status"]["message"]
    assert "$.metadata.annotations['kdispatch.io/workload']" in message
    assert "minCount 9" in message and "4 pods" in message


async def test_a_bad_operator_or_a_workload_of_another_kind_is_denied(webhook: Webhook) -> None:
    name = _unique("op")
    extra = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "Within"}]}]
                }
            }
        }
    }
    status, answer = await _post(webhook, "/mutate", body=review(_gpu_job(name, extra), uid=f"m-{name}"))
    message = answer["response"]["status"]["message"]
    assert status == 200 and not answer["response"]["allowed"]
    assert "nodeSelectorTerms[0].matchExpressions[0].operator" in message and "Within" in message
    wrong = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Workload", "spec": {}}
    obj = _gpu_job(name, {}, annotations={WORKLOAD_ANNOTATION: json.dumps(wrong)})
    status, answer = await _post(webhook, "/mutate", body=review(obj, uid=f"m2-{name}"))
    message = answer["response"]["status"]["message"]
    assert not answer["response"]["allowed"] and "scheduling.k8s.io/v1alpha2" in message


async def test_an_update_that_only_adds_a_toleration_is_recorded_as_a_change(webhook: Webhook, nats_url: str) -> None:
    name = _unique("upd")
    obj = _gpu_job(name, {})
    stored = await _admit(webhook, obj, uid=f"rev-{name}", object_uid=f"obj-{name}")
    grown = json.loads(json.dumps(stored))
    grown["spec"]["template"]["spec"]["tolerations"] = [{"key": "spot", "operator": "Exists"}]
    status, answer = await _post(webhook, "/mutate", body=review(grown, uid=f"mu-{name}", operation="UPDATE", old=stored))
    assert answer["response"]["allowed"], answer
    if answer["response"].get("patch"):
        grown = jsonpatch.apply(grown, json.loads(base64.b64decode(answer["response"]["patch"])))
    status, answer = await _post(webhook, "/validate", body=review(grown, uid=f"vu-{name}", operation="UPDATE", old=stored))
    assert status == 200 and answer["response"]["allowed"], answer
    updates = await _inbox(nats_url, webhook.root, subject=f"{webhook.root}.in.job.updated.team-a.{name}")
    (event, _), *_ = updates
    assert isinstance(event, ev.JobUpdated)
    assert event.pod_sets[0].tolerations == [ev.Toleration(key="spot", operator="Exists")]
