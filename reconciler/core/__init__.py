"""Pure core: ``state = fold(state, event)`` and ``decisions = decide(state)``.

Contract: no I/O, no clock, no randomness, no iteration order that depends on hash seeds. Time is
the ``at_ms`` of the log entry being folded. Enforced by import-linter (see pyproject.toml).
"""
