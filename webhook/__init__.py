"""The kdispatch admission webhook: validate, normalize and record every job submission.

``admit`` is pure (review in, response and events out); ``server`` its routes, served by ``http1``;
``__main__`` wires them to NATS. This package never imports ``reconciler``.
"""
