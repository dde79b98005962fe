"""Offline tools over a recorded log (``kdispatch log``, ``replay``, ``explain``): what-if under
another policy (``whatif``), its policy effect apart from the model error (``report``), per-job
outcomes and their differences (``outcomes``), the recorded policy as a ``--profile`` file
(``policydoc``), and one line per log entry for people (``render``). They read the log; they never write it or touch a cluster."""
