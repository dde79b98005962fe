"""JobSet: one pod set per replicated job."""

from __future__ import annotations

from typing import Any

from msgspec import Struct

from webhook.objects import Count, ObjectMeta
from webhook.podsets.batch import JobSpec
from webhook.podsets.common import PodSetSpec, decode, pod_spec, template_annotations


class JobTemplate(Struct, frozen=True, gc=False):
    spec: JobSpec | None = None


class ReplicatedJob(Struct, frozen=True, gc=False):
    name: str | None = None
    replicas: Count | None = None
    template: JobTemplate | None = None


class JobSetSpec(Struct, frozen=True, gc=False, rename="camel"):
    replicated_jobs: list[ReplicatedJob] | None = None


_NO_JOB = JobSpec()


def jobset_sets(spec: JobSetSpec, path: str) -> list[PodSetSpec]:
    out = []
    for i, rj in enumerate(spec.replicated_jobs or ()):
        job = rj.template.spec if rj.template is not None and rj.template.spec is not None else _NO_JOB
        parallelism = 1 if job.parallelism is None else job.parallelism
        completions = parallelism if job.completions is None else job.completions  # JobSet's default
        replicas = 1 if rj.replicas is None else rj.replicas
        out.append(
            PodSetSpec(
                name=rj.name or "",
                count=replicas * min(parallelism, completions),
                spec=pod_spec(job.template),
                annotations=template_annotations(job.template),
                path=f"{path}.replicatedJobs[{i}].template.spec.template.spec",
            )
        )
    return out


def jobset(raw: Any, meta: ObjectMeta, kind: str) -> list[PodSetSpec]:
    return jobset_sets(decode(raw, JobSetSpec, path="$.spec"), "$.spec")
