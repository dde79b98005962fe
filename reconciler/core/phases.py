"""Job phases as they appear in ``summary`` (strings, stable: tools and tests match on them)."""

QUEUED = "Queued"
NOMINATED = "Nominated"
PLACED = "Placed"
FINISHED = "Finished"
DELETED = "Deleted"
SUSPENDED = "Suspended"
UNSCHEDULABLE = "Unschedulable"

ALL = (QUEUED, SUSPENDED, NOMINATED, PLACED, UNSCHEDULABLE, FINISHED, DELETED)
TERMINAL = (FINISHED, DELETED)
WAITING = (QUEUED, UNSCHEDULABLE)  # waiting to be dispatched (Suspended waits for the user)
CHARGED = (NOMINATED, PLACED)  # holding its queue's quota (tenancy)

# Copy states (one remote copy = job uid x cluster x attempt).
COPY_NOMINATED = "nominated"  # we asked for it to be created
COPY_CREATED = "created"  # the worker has it
COPY_ADMITTED = "admitted"  # the worker admitted it (quota reserved)
COPY_STALE = "stale"  # superseded while its cluster was unreachable: withdraw when it returns
COPY_DONE = "done"  # finished, evicted or rejected there; the object may still exist
COPY_WITHDRAWING = "withdrawing"  # Withdrawn/CleanUp decided; waiting for RemoteGone
