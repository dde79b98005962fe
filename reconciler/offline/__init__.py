"""Offline tools over a recorded log (``kdispatch log``, ``replay``, ``explain``): what-if under
another policy (``whatif``), per-job outcomes and their differences (``outcomes``), and one line
per log entry for people (``render``). They read the log; they never write it or touch a cluster."""
