"""The event schema and the log. Imports nothing else of ours.

The contract: ``events`` (the tagged union), ``codec`` (JSON in and out), ``subjects`` (naming),
``store`` (the Log protocol), ``wire`` (inbox bytes -> sequencer items, ``Rejected`` for bad ones).
Backends: ``jetstream`` (the only package that talks to NATS: inbox, sequencer, reader, lease,
snapshots), ``memory`` (in process, for simulate and unit tests), ``jsonl`` (export / offline
reader). ``embedded`` starts nats-server from the wheel. See docs/eventlog.md.
"""
