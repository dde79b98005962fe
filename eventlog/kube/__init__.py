"""The Kubernetes vocabulary that the webhook and the reconciler share.

One place for what Kubernetes itself defines and both sides need the same way: the job kinds
kdispatch handles (suspend and managedBy fields, how pod sets are read), the label and
annotation names, resource quantities (``resource.Quantity`` rules) and durations. Pure values
and functions: no I/O, nothing of ours but ``eventlog.events``.
"""
