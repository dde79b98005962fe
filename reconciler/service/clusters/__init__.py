"""Worker clusters behind one interface: simulated (``simulated``) and Kubernetes (``kube``).

The actuator (``actuator``) applies the log's decisions to them; their observers report facts
into the inbox. ``rbac.API_CALLS`` lists every Kubernetes API call the adapter makes.
"""
