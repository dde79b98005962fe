"""The ``connect()`` options a config file's ``nats:`` section gives (credentials, nkey, TLS, replicas),
in one place for every command that opens the log (serve, log, replay, explain), so none of them
can forget one: the webhook reads the same fields from the same file."""

from __future__ import annotations

from typing import Any

from reconciler.config import NatsConfig


def connect_options(nats: NatsConfig) -> dict[str, Any]:
    """Keyword arguments for ``eventlog.jetstream.connect`` (the URL aside)."""
    from eventlog.jetstream import TlsFiles

    options: dict[str, Any] = {"replicas": nats.replicas}
    if nats.creds:
        options["creds"] = nats.creds
    if nats.nkey:
        options["nkey"] = nats.nkey
    if nats.tls is not None:
        options["tls"] = TlsFiles(ca=nats.tls.ca, cert=nats.tls.cert, key=nats.tls.key)
    return options
