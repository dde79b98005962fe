"""Every Kubernetes API call the adapter makes, as (cluster, api group, resource, verb).

Deploy builds the manager's and the workers' RBAC from this list, and ``api.KubeApi`` asserts
each call is in it before making it, so the list cannot rot. Non-resource URLs (``/version``)
are listed with an empty group and the path as the resource.
"""

from __future__ import annotations

from typing import Literal

from eventlog.kube.kinds import SUPPORTED_KINDS
from eventlog.kube.kueue import GROUP as KUEUE_GROUP
from eventlog.kube.kueue import KUEUE_KINDS

Role = Literal["manager", "worker"]
ApiCall = tuple[Role, str, str, str]

_MANAGER_JOB_VERBS = ("list", "watch", "get", "patch")
_WORKER_JOB_VERBS = ("list", "watch", "get", "create", "delete")

_CALLS: list[ApiCall] = [
    *(("manager", k.group, k.plural, verb) for k in SUPPORTED_KINDS for verb in _MANAGER_JOB_VERBS),
    *(("manager", k.group, f"{k.plural}/status", "patch") for k in SUPPORTED_KINDS if k.status_synced),
    ("manager", "", "secrets", "get"),  # a worker's kubeconfig given as a Secret reference
    # Worker clusters declared as objects (clusters/declared.py): followed, a finalizer held while
    # one drains, and the status the leader writes.
    ("manager", "kdispatch.io", "workerclusters", "list"),
    ("manager", "kdispatch.io", "workerclusters", "watch"),
    ("manager", "kdispatch.io", "workerclusters", "patch"),
    ("manager", "kdispatch.io", "workerclusters/status", "patch"),
    ("manager", "", "/version", "get"),
    # Events on the user's job (clusters.visibility): one per series, its count patched
    ("manager", "events.k8s.io", "events", "create"),
    ("manager", "events.k8s.io", "events", "patch"),
    # The queue configuration: Kueue's objects and the namespaces' labels (clusters/queues.py).
    *(("manager", KUEUE_GROUP, plural, verb) for plural in KUEUE_KINDS.values() for verb in ("list", "watch")),
    ("manager", "", "namespaces", "list"),
    ("manager", "", "namespaces", "watch"),
    # Who may read the web page and API (``web.authorization: kubernetes``; service/web/access.py):
    # the bearer token's user, then may that user list Jobs in a namespace.
    ("manager", "authentication.k8s.io", "tokenreviews", "create"),
    ("manager", "authorization.k8s.io", "subjectaccessreviews", "create"),
    *(("worker", k.group, k.plural, verb) for k in SUPPORTED_KINDS for verb in _WORKER_JOB_VERBS),
    ("worker", "kueue.x-k8s.io", "workloads", "list"),
    ("worker", "kueue.x-k8s.io", "workloads", "watch"),
    ("worker", "kueue.x-k8s.io", "clusterqueues", "list"),
    ("worker", "", "nodes", "list"),
    ("worker", "", "pods", "list"),
    # Capacity facts (clusters/capacity_facts.py): nodes, pods and Kueue's queues and topologies, followed.
    ("worker", "", "nodes", "watch"),
    ("worker", "", "pods", "watch"),
    *(("worker", KUEUE_GROUP, plural, verb) for plural in ("clusterqueues", "localqueues", "topologies") for verb in ("list", "watch")),
    ("worker", "", "/version", "get"),
]
# Two versions of one resource (Workload v1beta1/v1beta2, MPIJob v1/v2beta1) are one grant.
API_CALLS: list[ApiCall] = list(dict.fromkeys(_CALLS))

_ALLOWED = frozenset(API_CALLS)


class UnlistedApiCall(AssertionError):
    """A call missing from ``API_CALLS``: add it there (and to deploy's RBAC) first."""


def check(role: Role, group: str, resource: str, verb: str) -> None:
    if (role, group, resource, verb) not in _ALLOWED:
        raise UnlistedApiCall(f"{role} {verb} {group or 'core'}/{resource} is not in rbac.API_CALLS")
