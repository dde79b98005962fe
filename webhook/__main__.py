"""``python -m webhook``: the admission webhook alone (``kdispatch serve --webhook`` runs this too).

    python -m webhook --port 9443 --nats nats://127.0.0.1:4222 --data-dir .kdispatch \
        [--tls-cert tls.crt --tls-key tls.key] [--config kdispatch.yaml]

With no ``--nats`` (and none in the config) it starts the embedded nats-server. With no TLS files
it makes a development CA and serving certificate under ``<data-dir>/webhook-tls/`` and writes the
CA bundle there (``ca.crt``) for the WebhookConfiguration. SIGTERM/SIGINT: stop accepting, let the
reviews in flight finish, then close.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import structlog
import yaml

from eventlog import events as ev
from eventlog.jetstream import TlsFiles
from eventlog.kube.kueue import QueueConfigError, load_queues
from webhook import admit
from webhook.http1 import Listener
from webhook.limits import (
    DEFAULT_MAX_BYTES_IN_FLIGHT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_IN_FLIGHT,
    HANDSHAKE_TIMEOUT_S,
    KEEPALIVE_TIMEOUT_S,
)
from webhook.nats_link import NatsLink
from webhook.priority import PriorityError, parse_mapping
from webhook.server import DEFAULT_MAX_BODY, DEFAULT_READ_TIMEOUT_S, WebhookServer
from webhook.tls import DEFAULT_SANS, CertFiles, self_signed

log = structlog.get_logger("webhook")
_PR_SET_PDEATHSIG = 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m webhook", description="kdispatch admission webhook (HTTPS).")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    p.add_argument("--port", type=int, default=9443, help="HTTPS port (default 9443)")
    p.add_argument("--nats", default=None, help="NATS URL; default: the config's nats.url, else the embedded server")
    p.add_argument("--nats-creds", default=None, help="NATS credentials file")
    p.add_argument(
        "--nats-nkey",
        default=None,
        help="NATS user nkey seed file (the webhook's own user; default: the config's nats.nkey)",
    )
    p.add_argument("--root", default="kd", help="which log on the NATS server (subject root, default kd)")
    p.add_argument("--data-dir", default=None, help="data directory (default: the config's dataDir, else .kdispatch)")
    p.add_argument("--tls-cert", default=None, help="serving certificate (PEM); reloaded when it changes")
    p.add_argument("--tls-key", default=None, help="its private key (PEM)")
    p.add_argument(
        "--tls-san",
        action="append",
        default=[],
        help="extra DNS name or IP for the self-signed certificate, e.g. kdispatch-webhook.kdispatch-system.svc",
    )
    p.add_argument("--config", default=None, help="kdispatch config file (reads nats.url/creds/nkey/tls/replicas, dataDir, policy.priorityClasses)")
    p.add_argument("--priority-classes", default="", help="NAME=VALUE,... priority class values (added to the config's)")
    p.add_argument("--queues", default=None, help="queue configuration: Kueue objects, a YAML file or a directory")
    p.add_argument("--publish-timeout", type=float, default=1.0, help="seconds to wait for the inbox ack (default 1)")
    p.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY, help="largest review accepted")
    p.add_argument(
        "--read-timeout", type=float, default=DEFAULT_READ_TIMEOUT_S, help="seconds for a request body to arrive (default 10)"
    )
    p.add_argument(
        "--max-in-flight", type=int, default=DEFAULT_MAX_IN_FLIGHT,
        help=f"reviews answered at once; more get 429 with Retry-After (default {DEFAULT_MAX_IN_FLIGHT})",
    )
    p.add_argument(
        "--max-bytes-in-flight", type=int, default=DEFAULT_MAX_BYTES_IN_FLIGHT,
        help=f"request bytes of the reviews in flight; more get 429 (default {DEFAULT_MAX_BYTES_IN_FLIGHT >> 20} MiB)",
    )
    p.add_argument(
        "--max-connections", type=int, default=DEFAULT_MAX_CONNECTIONS,
        help=f"open connections; more are closed on accept (default {DEFAULT_MAX_CONNECTIONS})",
    )
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    p.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="shut down (as on SIGTERM) when the parent process dies; for supervisors such as kdispatch serve",
    )
    return p


def exit_with_parent() -> None:
    """Ask the kernel for SIGTERM when the parent dies (Linux ``PR_SET_PDEATHSIG``), so a child of a
    supervisor that was killed does not live on as an orphan."""
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if parent == 1 or os.getppid() != parent:  # it died before we asked
        os.kill(os.getpid(), signal.SIGTERM)


def tune_gc() -> None:
    """Each review allocates a few thousand short-lived objects (decoded JSON, NATS messages,
    futures), almost none in cycles. Freezing what start-up built and collecting the young
    generation less often cuts the CPU per review by about a tenth (bench/webhook.py)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)


def configure_logging(level: str) -> None:
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.JSONRenderer(),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )


def read_config(path: str | None) -> dict[str, Any]:
    """The few keys the webhook needs from the kdispatch config file (its schema lives with the
    reconciler, which this package may not import)."""
    if path is None:
        return {}
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as err:
        raise SystemExit(f"{path}: {err}") from None
    if not isinstance(raw, dict):
        raise SystemExit(f"{path}: expected a mapping at the top level")
    out: dict[str, Any] = {}
    nats: dict[str, Any] = raw["nats"] if isinstance(raw.get("nats"), dict) else {}
    if isinstance(nats.get("url"), str):
        out["nats"] = nats["url"]
    if isinstance(nats.get("creds"), str):
        out["creds"] = nats["creds"]
    if isinstance(nats.get("nkey"), str):
        out["nkey"] = nats["nkey"]
    replicas = nats.get("replicas", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise SystemExit(f"{path}: nats.replicas must be a positive integer")
    out["replicas"] = replicas
    tls = nats.get("tls")
    if tls is not None:
        if not isinstance(tls, dict) or not all(isinstance(tls.get(k), (str, type(None))) for k in ("ca", "cert", "key")):
            raise SystemExit(f"{path}: nats.tls must have string fields ca, cert, key")
        out["nats_tls"] = TlsFiles(ca=tls.get("ca"), cert=tls.get("cert"), key=tls.get("key"))
    if isinstance(raw.get("dataDir"), str):
        out["data_dir"] = raw["dataDir"]
    policy: dict[str, Any] = raw["policy"] if isinstance(raw.get("policy"), dict) else {}
    classes = policy.get("priorityClasses", {})
    if not isinstance(classes, dict) or not all(isinstance(v, int) and not isinstance(v, bool) for v in classes.values()):
        raise SystemExit(f"{path}: policy.priorityClasses must map names to integers")
    out["priority_classes"] = {str(k): v for k, v in classes.items()}
    if isinstance(raw.get("queues"), str):
        out["queues"] = raw["queues"]
    return out


def load_queues_or_exit(path: str | None) -> ev.QueuesConfigured | None:
    """The queue configuration (``eventlog.kube.kueue``), or None without one; a bad one stops
    start-up with the loader's message (file:line, object, field)."""
    if path is None:
        return None
    try:
        return load_queues(path)
    except QueueConfigError as err:
        raise SystemExit(f"invalid queue configuration: {err}") from None


async def _reload_tls(certs: CertFiles, every_s: float) -> None:
    while True:
        await asyncio.sleep(every_s)
        certs.reload_if_changed()


async def run(args: argparse.Namespace) -> int:
    stop = asyncio.Event()  # first, so a SIGTERM during start-up is a graceful stop too
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if args.exit_with_parent:
        exit_with_parent()
    config = read_config(args.config)
    try:
        classes = {**config.get("priority_classes", {}), **parse_mapping(args.priority_classes)}
    except PriorityError as err:
        raise SystemExit(f"--priority-classes: {err}") from None
    queues = load_queues_or_exit(args.queues or config.get("queues"))
    data_dir = Path(args.data_dir or config.get("data_dir") or ".kdispatch")
    data_dir.mkdir(parents=True, exist_ok=True)
    if bool(args.tls_cert) != bool(args.tls_key):
        raise SystemExit("give both --tls-cert and --tls-key, or neither (for a self-signed development certificate)")
    if args.tls_cert:
        cert, key, ca = Path(args.tls_cert), Path(args.tls_key), None
    else:
        ca, cert, key = self_signed(data_dir / "webhook-tls", names=[*args.tls_san, *DEFAULT_SANS])
    certs = CertFiles(cert, key)

    link = NatsLink(
        args.nats or config.get("nats"),
        data_dir=data_dir,
        root=args.root,
        creds=args.nats_creds or config.get("creds"),
        nkey=args.nats_nkey or config.get("nkey"),
        replicas=config.get("replicas", 1),
        tls=config.get("nats_tls"),
    )
    link.start()
    server = WebhookServer(
        settings=admit.Settings(priority_classes=classes, queues=queues),
        inbox=link.inbox,
        nats_ready=link.ready,
        publish_timeout_s=args.publish_timeout,
        max_body=args.max_body_bytes,
        read_timeout_s=args.read_timeout,
        max_in_flight=args.max_in_flight,
        max_bytes_in_flight=args.max_bytes_in_flight,
    )
    listener = Listener(
        server,
        max_connections=args.max_connections,
        keepalive_s=KEEPALIVE_TIMEOUT_S,
        handshake_timeout_s=HANDSHAKE_TIMEOUT_S,
        on_refused=server.metrics.connections_refused.inc,
    )
    await listener.start(args.host, args.port, ssl_context=certs.context, backlog=1024)
    reloader = asyncio.create_task(_reload_tls(certs, 5.0), name="tls-reload")
    tune_gc()
    log.info("webhook_listening", url=f"https://{args.host}:{args.port}", ca_bundle=str(ca) if ca else None, cert=str(cert))

    await stop.wait()

    log.info("webhook_stopping", in_flight=server.in_flight)
    listener.stop_accepting()  # no new connections
    await server.wait_idle()  # reviews in flight are answered
    reloader.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await reloader
    await listener.close()
    await link.close()
    log.info("webhook_stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    try:
        return asyncio.run(run(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
