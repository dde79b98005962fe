"""The reconciler: a pure core (``reconciler.core``: fold, decide, plugins; no I/O, no clock, no
randomness) and an imperative shell (``reconciler.shell``: sequencer loop, actuator, cluster
adapters) plus the CLI. The core's only input is the log; its only output is decisions."""
