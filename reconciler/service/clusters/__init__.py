"""Worker clusters behind one interface: simulated (``sim``) and Kubernetes (``kube``).

The actuator (``reconciler.service.clusters.actuator``) applies the log's decisions to them; their observers
report facts into the inbox. ``rbac.API_CALLS`` lists every Kubernetes API call the adapter makes.
"""
