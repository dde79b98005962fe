"""``kdispatch demo``: the end-to-end demo (see ``reconciler.demo.run``)."""
