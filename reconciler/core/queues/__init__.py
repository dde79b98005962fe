"""Tenancy in the pure core: Kueue-style ClusterQueues, cohorts and quotas, fleet-wide.

``tree`` compiles the last ``QueuesConfigured`` into integer arrays per (flavor, resource);
``usage`` charges and releases jobs' quota and answers "how much may this queue still take"
with Kueue's borrowing and lending rules; ``order`` is the weighted DRF tournament across
queues; ``admit`` picks a job's flavors or says why it must wait; ``victims`` chooses whom a
queue may preempt for quota; ``facts`` is what ``explain`` and ``summary`` report.

Tenancy is on iff the last ``QueuesConfigured`` has at least one ClusterQueue; off, none of
this runs and the core decides exactly as before.
"""
