"""Imperative shell: the sequencer loop, the actuator, cluster adapters. All I/O lives here."""
