"""The event schema and the log. Imports nothing else of ours.

The contract: ``events`` (the tagged union), ``codec`` (JSON in and out), ``subjects`` (naming),
``store`` (the Log protocol), ``jetstream`` (the only module that talks to NATS), ``memory``
(in-process log for simulate and unit tests), ``embedded`` (nats-server launcher).
"""
