"""The reconciler: a pure core (``reconciler.core``: fold, decide, plugins; no I/O, no clock, no
randomness) and the imperative shell around it, in rooms: ``service`` (the long-running
reconciler), ``offline`` (tools over a recorded log), ``history`` (the log back into state, for
both), ``edge`` (helpers for both) plus the CLI. The core's only input is the log; its only
output is decisions. docs/architecture.md maps the rooms and what may import what."""
