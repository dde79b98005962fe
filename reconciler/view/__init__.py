"""What a person looks at, derived from a folded core state (and, for a job's timeline, its log
entries): queues, clusters, jobs in dispatch order, one job's timeline and explanation.

Shared by ``kdispatch status`` / ``kdispatch queue`` (which fold the log offline) and the
reconciler's HTTP API and web page (which read the leader's state), so all of them agree with
``explain`` and ``replay``. Pure functions over plain data: no I/O, no clock.
"""

from reconciler.view.rows import (
    DEFAULT_QUEUE,
    ClusterRow,
    JobRow,
    QueueRow,
    cluster_rows,
    explanation,
    job_row,
    job_rows,
    queue_rows,
)
from reconciler.view.timeline import TimelineRow, concerns, timeline_row

__all__ = [
    "DEFAULT_QUEUE",
    "ClusterRow",
    "JobRow",
    "QueueRow",
    "TimelineRow",
    "cluster_rows",
    "concerns",
    "explanation",
    "job_row",
    "job_rows",
    "queue_rows",
    "timeline_row",
]
