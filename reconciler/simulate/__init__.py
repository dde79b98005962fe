"""``kdispatch simulate``: the pure core driven in virtual time against simulated worker clusters.

Layout: ``trace`` (the trace model every reader produces), ``readers/`` (Alibaba GPU 2023,
Tiresias, our own CSV, cluster files), ``runner`` (the (time, seq) event loop, no NATS, no
sleeping), ``recorder`` + ``metrics`` (what happened, as numbers), ``report`` and ``plots``
(table, JSON, PNG).
"""
