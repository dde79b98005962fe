"""The long-running reconciler (``kdispatch serve``, and ``kdispatch demo``): leader election
(``leader``), the sequencer loop (``loop``), the actuator and the cluster adapters
(``clusters``), Prometheus metrics (``metrics``), the supervised webhook child (``child``), all
put together in one place, ``wiring``."""
