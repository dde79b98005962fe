"""The demo's jobs: manifests of four kinds built from real Kueue examples, with placement spec.

Templates (``manifests/``, copied from kubernetes-sigs/kueue's site examples) are filled with
deterministic variety (a seeded ``random.Random``: the demo is not the core, but the same
``--seed`` gives the same jobs): pod counts and requests, GPUs, cluster selectors, affinities,
tolerations, priority classes, and a run time (``kdispatch.io/simulated-runtime``) that the
simulated workers honour.
"""

from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

NAMESPACE = "demo"
GPU = "nvidia.com/gpu"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASSES = {"low": 100, "normal": 500, "high": 1000}

_TEMPLATES = {
    "Job": "sample-job.yaml",
    "JobSet": "sample-jobset.yaml",
    "RayJob": "ray-job-sample.yaml",
    "PyTorchJob": "sample-pytorchjob.yaml",
}


def template(kind: str) -> dict[str, Any]:
    text = resources.files("reconciler.demo").joinpath("manifests", _TEMPLATES[kind]).read_text()
    doc: dict[str, Any] = yaml.safe_load(text)
    return doc


@dataclass(frozen=True)
class DemoJob:
    """One job the demo submits: its manifest and what the demo expects of it."""

    name: str
    kind: str
    job_class: str  # for the summary: cpu-batch, gpu-train, ...
    priority_class: str
    manifest: dict[str, Any]
    gpus: int
    phase: str  # "main" (steady stream), "filler" (long low-priority GPU work), "burst"

    @property
    def key(self) -> str:
        return f"{NAMESPACE}/{self.name}"


def _requests(*, cpu: str, memory: str, gpus: int = 0) -> dict[str, Any]:
    req: dict[str, Any] = {"cpu": cpu, "memory": memory}
    out: dict[str, Any] = {"requests": req}
    if gpus:
        req[GPU] = str(gpus)
        out["limits"] = {GPU: str(gpus)}
    return out


def _set_containers(pod_template: dict[str, Any], res: dict[str, Any]) -> None:
    for container in pod_template["spec"]["containers"]:
        container["resources"] = copy.deepcopy(res)


def _metadata(doc: dict[str, Any], *, name: str, priority_class: str, runtime_s: float) -> None:
    meta = doc.setdefault("metadata", {})
    meta.pop("generateName", None)
    meta["name"] = name
    meta["namespace"] = NAMESPACE
    labels = meta.setdefault("labels", {})
    labels[QUEUE_LABEL] = "user-queue"
    labels[PRIORITY_LABEL] = priority_class
    meta.setdefault("annotations", {})["kdispatch.io/simulated-runtime"] = f"{round(runtime_s * 1000)}ms"


def batch_job(name: str, *, pods: int, cpu: str, runtime_s: float, priority_class: str) -> dict[str, Any]:
    doc = template("Job")
    doc["spec"]["parallelism"] = pods
    doc["spec"]["completions"] = pods
    _set_containers(doc["spec"]["template"], _requests(cpu=cpu, memory="512Mi"))
    _metadata(doc, name=name, priority_class=priority_class, runtime_s=runtime_s)
    return doc


def jobset(name: str, *, workers: int, runtime_s: float, priority_class: str) -> dict[str, Any]:
    doc = template("JobSet")
    rjobs = doc["spec"]["replicatedJobs"]
    rjobs[0]["replicas"] = workers
    _set_containers(rjobs[0]["template"]["spec"]["template"], _requests(cpu="1", memory="1Gi"))
    _set_containers(rjobs[1]["template"]["spec"]["template"], _requests(cpu="2", memory="1Gi"))
    _metadata(doc, name=name, priority_class=priority_class, runtime_s=runtime_s)
    return doc


def rayjob(name: str, *, workers: int, gpus_per_worker: int, runtime_s: float, priority_class: str) -> dict[str, Any]:
    doc = template("RayJob")
    spec = doc["spec"]["rayClusterSpec"]
    _set_containers(spec["headGroupSpec"]["template"], _requests(cpu="1", memory="2Gi"))
    group = spec["workerGroupSpecs"][0]
    group["replicas"] = workers
    group["minReplicas"] = workers
    group["maxReplicas"] = max(workers, group.get("maxReplicas", workers))
    _set_containers(group["template"], _requests(cpu="2", memory="4Gi", gpus=gpus_per_worker))
    _metadata(doc, name=name, priority_class=priority_class, runtime_s=runtime_s)
    return doc


def pytorchjob(name: str, *, workers: int, gpus: int, runtime_s: float, priority_class: str) -> dict[str, Any]:
    doc = template("PyTorchJob")
    specs = doc["spec"]["pytorchReplicaSpecs"]
    specs["Worker"]["replicas"] = workers
    _set_containers(specs["Master"]["template"], _requests(cpu="2", memory="4Gi", gpus=gpus))
    _set_containers(specs["Worker"]["template"], _requests(cpu="2", memory="4Gi", gpus=gpus))
    _metadata(doc, name=name, priority_class=priority_class, runtime_s=runtime_s)
    return doc


def annotate(doc: dict[str, Any], **placement: Any) -> dict[str, Any]:
    """Placement annotations the way a user writes them (``kdispatch.io/<field>``)."""
    annotations = doc["metadata"].setdefault("annotations", {})
    for field, value in placement.items():
        key = "kdispatch.io/" + field.replace("_", "-")
        annotations[key] = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return doc


GPU_AFFINITY = {
    "required": [{"matchExpressions": [{"key": "kdispatch.io/gpu", "operator": "In", "values": ["a100", "h100", "t4"]}]}],
    "preferred": [
        {"weight": 60, "preference": {"matchExpressions": [{"key": "kdispatch.io/gpu", "operator": "In", "values": ["h100"]}]}}
    ],
}
H100_TOLERATION = [{"key": "kdispatch.io/gpu", "operator": "Equal", "value": "h100", "effect": "NoSchedule"}]
SPOT_TOLERATION = [{"key": "kdispatch.io/spot", "operator": "Exists", "effect": "NoSchedule"}]


@dataclass(frozen=True)
class Pace:
    """Run times of the demo's jobs; ``fast`` shortens everything for the test."""

    short_s: tuple[float, float] = (3.0, 9.0)
    filler_s: tuple[float, float] = (30.0, 40.0)
    burst_s: tuple[float, float] = (4.0, 8.0)

    @classmethod
    def fast(cls) -> Pace:
        return cls(short_s=(1.0, 3.0), filler_s=(14.0, 18.0), burst_s=(1.0, 2.0))


def _main_job(i: int, rng: random.Random, pace: Pace) -> DemoJob:
    roll = rng.random()
    prio = rng.choice(["low", "normal", "normal", "high"])
    runtime = rng.uniform(*pace.short_s)
    name = f"job-{i:03d}"
    if roll < 0.40:
        doc = batch_job(name, pods=rng.randint(1, 4), cpu=rng.choice(["500m", "1", "2"]), runtime_s=runtime, priority_class=prio)
        if rng.random() < 0.3:
            annotate(doc, cluster_selector={"tier": "batch"} if rng.random() < 0.5 else "region=east")
        if rng.random() < 0.2:
            annotate(doc, cluster_tolerations=SPOT_TOLERATION)
        return DemoJob(name, "Job", "cpu-batch", prio, doc, 0, "main")
    if roll < 0.60:
        name = f"jobset-{i:03d}"
        doc = jobset(name, workers=rng.randint(1, 3), runtime_s=runtime, priority_class=prio)
        if rng.random() < 0.5:
            annotate(doc, cluster_affinity={"preferred": [{"weight": 50, "preference": {"matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["batch"]}]}}]})
        return DemoJob(name, "JobSet", "cpu-jobset", prio, doc, 0, "main")
    if roll < 0.78:
        name = f"ray-{i:03d}"
        workers, gpus = rng.randint(1, 2), rng.choice([0, 1])
        doc = rayjob(name, workers=workers, gpus_per_worker=gpus, runtime_s=runtime, priority_class=prio)
        if gpus:
            annotate(doc, cluster_affinity=GPU_AFFINITY, cluster_tolerations=H100_TOLERATION + SPOT_TOLERATION)
        return DemoJob(name, "RayJob", "ray", prio, doc, workers * gpus, "main")
    name = f"pytorch-{i:03d}"
    workers, gpus = rng.randint(1, 3), rng.choice([1, 1, 2])
    doc = pytorchjob(name, workers=workers, gpus=gpus, runtime_s=runtime, priority_class=prio)
    annotate(doc, cluster_affinity=GPU_AFFINITY, cluster_tolerations=H100_TOLERATION)
    return DemoJob(name, "PyTorchJob", "gpu-train", prio, doc, (workers + 1) * gpus, "main")


def filler_jobs(count: int, rng: random.Random, pace: Pace) -> list[DemoJob]:
    """Long, low-priority GPU training that fills the GPU clusters before the burst."""
    out = []
    for i in range(count):
        name = f"filler-{i:03d}"
        doc = pytorchjob(name, workers=1, gpus=2, runtime_s=rng.uniform(*pace.filler_s), priority_class="low")
        annotate(doc, cluster_affinity=GPU_AFFINITY, cluster_tolerations=H100_TOLERATION + SPOT_TOLERATION)
        out.append(DemoJob(name, "PyTorchJob", "gpu-filler", "low", doc, 4, "filler"))
    return out


EAST_PREFERRED = {
    "preferred": [
        {"weight": 100, "preference": {"matchExpressions": [{"key": "region", "operator": "In", "values": ["east"]}]}}
    ]
}


def long_cpu_jobs(count: int, rng: random.Random, pace: Pace) -> list[DemoJob]:
    """Long CPU jobs that prefer (not require) east: running there when it goes silent, they are
    what the loss visibly re-places elsewhere."""
    out = []
    for i in range(count):
        name = f"long-{i:03d}"
        doc = batch_job(name, pods=2, cpu="2", runtime_s=rng.uniform(*pace.filler_s), priority_class="normal")
        annotate(doc, cluster_affinity=EAST_PREFERRED)
        out.append(DemoJob(name, "Job", "cpu-long", "normal", doc, 0, "filler"))
    return out


def burst_jobs(count: int, rng: random.Random, pace: Pace) -> list[DemoJob]:
    """Urgent high-priority GPU jobs: they only fit by preempting the fillers."""
    out = []
    for i in range(count):
        name = f"urgent-{i:03d}"
        doc = pytorchjob(name, workers=1, gpus=2, runtime_s=rng.uniform(*pace.burst_s), priority_class="high")
        annotate(doc, cluster_affinity=GPU_AFFINITY, cluster_tolerations=H100_TOLERATION + SPOT_TOLERATION)
        out.append(DemoJob(name, "PyTorchJob", "gpu-urgent", "high", doc, 4, "burst"))
    return out


def main_jobs(count: int, rng: random.Random, pace: Pace) -> list[DemoJob]:
    return [_main_job(i, rng, pace) for i in range(count)]
