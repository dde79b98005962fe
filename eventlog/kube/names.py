"""Label, annotation and field values that the webhook, the reconciler and Kueue read alike.

Both sides must spell these the same way: the webhook writes what the manager's watcher reads
back, and the worker copies carry labels the reconciler finds them by.
"""

from __future__ import annotations

# ---- Kueue's names (read as Kueue reads them) -------------------------------------------------

KUEUE_PREFIX = "kueue.x-k8s.io/"
QUEUE_LABEL = KUEUE_PREFIX + "queue-name"
PRIORITY_CLASS_LABEL = KUEUE_PREFIX + "priority-class"
POD_GROUP_NAME = KUEUE_PREFIX + "pod-group-name"  # a label or an annotation on a plain Pod
POD_GROUP_TOTAL = KUEUE_PREFIX + "pod-group-total-count"
MIN_PARALLELISM_ANNOTATION = KUEUE_PREFIX + "job-min-parallelism"

MANAGED_BY = KUEUE_PREFIX + "multikueue"
"""The managedBy value that holds a job for kdispatch: the one value other than its own controller's
that every kind's validation accepts, and the one its own controller leaves alone."""

# ---- kdispatch's names ------------------------------------------------------------------------

PREFIX = "kdispatch.io/"

POD_SCHEDULING_GATE = PREFIX + "dispatch"
"""Plain Pods have no suspend field: the webhook holds them with this scheduling gate."""

# On the manager object. The placement (user's, canonicalised by the webhook) and the runtime a
# simulated worker uses are the user's; the rest is written by kdispatch.
PLACEMENT_ANNOTATION = PREFIX + "placement"
RUNTIME_ANNOTATION = PREFIX + "simulated-runtime"
EXPECTED_DURATION_ANNOTATION = PREFIX + "expected-duration"  # the user's runtime guess ("2h"), for start forecasts
CLUSTER_ANNOTATION = PREFIX + "cluster"  # where it runs
CLUSTER_LABEL = PREFIX + "cluster"  # the same, as a label: ``kubectl get jobs -L kdispatch.io/cluster``
STATUS_ANNOTATION = PREFIX + "status"  # what kdispatch knows, as JSON (docs/clusters.md)
# The pod sets and priority the webhook computed, for the manager watcher (which may not import the
# per-kind code): recomputed at every UPDATE so a user cannot forge them.
POD_SETS_ANNOTATION = PREFIX + "pod-sets"
PRIORITY_ANNOTATION = PREFIX + "priority"
WORKLOAD_ANNOTATION = PREFIX + "workload"  # a Workload API object (JSON) naming the job's pod groups

# On a worker copy: whose copy it is.
ORIGIN_LABEL = PREFIX + "origin"  # the manager's id
JOB_UID_LABEL = PREFIX + "job-uid"  # the manager object's uid
ATTEMPT_LABEL = PREFIX + "attempt"

# On a ClusterQueue (beyond Kueue): the WorkloadPriorityClasses its namespaces may use, separated
# by commas ("low,normal"); absent: any class. docs/tenancy.md.
ALLOWED_PRIORITY_CLASSES_ANNOTATION = PREFIX + "allowed-priority-classes"

# On a worker cluster in the log (ClusterUpdated.taints): its WorkerCluster object was deleted and it
# is draining (docs/clusters.md, "Clusters as objects"). NoSchedule: copies there are left to finish;
# NoExecute: they are withdrawn. No toleration matches it, and ClusterHealth keeps new work off it.
DRAINING_TAINT = PREFIX + "draining"
