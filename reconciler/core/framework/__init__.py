"""The plugin framework, after kube-scheduler's: typed statuses, one registry, a fixed pipeline.

Unlike kube-scheduler, a plugin sees *all* clusters at once: ``filter`` returns one verdict code
per cluster (a numpy array) and ``score`` one integer per candidate, so a job is evaluated with a
handful of vectorised operations instead of a Python loop over clusters.
"""
