"""``kdispatch serve``: the reconciler process (leader candidate + actuator + observers + metrics).

What runs is put together by ``reconciler.service.wiring`` (shared with ``demo`` and the tests);
this module is the process around it: arguments, config, logging, the log, signals.

- the leader candidate loop (``reconciler.service.leader``): waits for the lease, then sequences;
- the actuator and the cluster observers (``reconciler.service.clusters``), unless
  ``--no-actuator`` — several replicas may run them: they are idempotent;
- ``/metrics``, the read-only API and the web page (docs/api.md) on ``--metrics-port``;
- with ``--webhook``, ``python -m webhook`` as a supervised child process (never imported).

SIGTERM / SIGINT: stop leading (the lease is released so a standby takes over at once), stop the
actuator, terminate the webhook, close NATS (and the embedded server if we started it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys
import uuid
from pathlib import Path
from typing import Any

from reconciler.commands.argtypes import int_at_least, port, port_or_any, positive_float, positive_int
from reconciler.edge import gcpolicy

HELP = "run the reconciler: leader election, sequencing, actuator, metrics (and the webhook)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="kdispatch config file (YAML)")
    parser.add_argument("--nats", metavar="URL", help="NATS server URL (default: the config's, else embedded)")
    parser.add_argument("--data-dir", metavar="DIR", help="data dir for the embedded nats-server (default .kdispatch)")
    parser.add_argument(
        "--queues",
        metavar="PATH",
        help="queue configuration: Kueue objects (ClusterQueue, LocalQueue, Cohort, ...), a YAML file or a "
        "directory of them (default: the config's queues:, else the manager cluster's objects)",
    )
    parser.add_argument("--webhook", action="store_true", help="also run the admission webhook (child process)")
    parser.add_argument("--webhook-port", type=port, default=9443, metavar="P", help="webhook HTTPS port (9443)")
    parser.add_argument("--metrics-port", type=port_or_any, metavar="P", help="serve /metrics, the read-only API (/api/v1) and the web page on this port")
    parser.add_argument("--no-actuator", action="store_true", help="sequence and decide only; do not touch clusters")
    parser.add_argument("--leader-id", metavar="ID", help="this replica's name in the lease (default host-pid-rand)")
    parser.add_argument("--lease-ttl", type=positive_float, default=5.0, metavar="S", help="leader lease TTL in seconds (5)")
    parser.add_argument("--snapshot-every", type=positive_int, default=5000, metavar="N", help="entries between snapshots")
    parser.add_argument("--root", default="kd", metavar="NAME", help="which log on that server (default kd)")
    parser.add_argument(
        "--forecast-limit",
        type=int_at_least(0),
        default=100,
        metavar="N",
        help="estimate the start of the first N waiting jobs in dispatch order (100; 0: no estimates)",
    )
    parser.add_argument(
        "--forecast-interval",
        type=positive_float,
        default=30.0,
        metavar="S",
        help="remake the start estimates at most every S seconds of log time (30)",
    )
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def default_leader_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


async def run_async(args: argparse.Namespace) -> int:
    # Imported here, not at the top: building the parser (`kdispatch serve --help`) must not load
    # the service (aiohttp, structlog, NATS, the leader loop).
    from reconciler import core
    from reconciler.config import ConfigError, load_config
    from reconciler.edge import logging as klog
    from reconciler.edge.logsource import URL_FILE
    from reconciler.edge.natsopts import connect_options
    from reconciler.edge.plugins import PluginDiscoveryError, installed
    from reconciler.policy import policy_event
    from reconciler.service.loop import LoopSettings

    leader_id = args.leader_id or default_leader_id()
    klog.configure(level=args.log_level, role="serve", replica=leader_id)
    log = klog.get_logger("reconciler.serve")
    try:
        config = load_config(args.config)
        policy = policy_event(config.policy)
    except ConfigError as err:
        print(f"kdispatch serve: invalid config: {err}", file=sys.stderr)
        return 2
    try:
        plugins = installed()
    except PluginDiscoveryError as err:
        print(f"kdispatch serve: {err}", file=sys.stderr)
        return 2
    problems = core.validate_policy(policy, plugins.registry)
    if problems:  # an unknown plugin or bad plugin args: say which, before leading with it
        where = args.config or "the default config"
        print(f"kdispatch serve: invalid policy in {where}:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    queues_path = args.queues or config.queues
    queues = None
    if queues_path is not None:
        from eventlog.kube.kueue import QueueConfigError, read_queues

        try:  # before the log is opened: a bad queue configuration changes nothing
            loaded = read_queues(queues_path)
        except QueueConfigError as err:
            print(f"kdispatch serve: invalid queue configuration: {err}", file=sys.stderr)
            return 2
        queues = loaded.config
        if loaded.skipped:
            log.info("queues_objects_skipped", reason="not queue configuration", objects=loaded.skipped)
    from eventlog.jetstream import connect
    from eventlog.natsauth import inbox_prefix

    url = args.nats or config.nats.url
    data_dir = args.data_dir or config.data_dir
    options = connect_options(config.nats)
    webhook_nkey: str | None = None
    try:
        if url is None:
            # The embedded server: authorization on, one nkey user per component (docs/security.md).
            from eventlog.natsauth import secured_embedded

            embedded, creds = await secured_embedded(data_dir, root=args.root)
            options.update(embedded=embedded, nkey=creds.seed_file("reconciler"))
            options.pop("creds", None)
            webhook_nkey = str(creds.seed_file("webhook"))
        jlog = await connect(
            url,
            data_dir=data_dir,
            root=args.root,
            name=f"kdispatch-serve-{leader_id}",
            inbox_prefix=inbox_prefix("reconciler"),
            **options,
        )
    except Exception as err:
        print(f"kdispatch serve: cannot open the log at {url or data_dir}: {err}", file=sys.stderr)
        return 1
    url_file = Path(data_dir) / URL_FILE
    if url is None:  # our embedded server: tell `kdispatch log/replay/explain` where it is
        url_file.write_text(jlog.url + "\n")
    stop = asyncio.Event()
    _install_signal_handlers(stop, log)
    from reconciler.service.wiring import Settings, System, build

    system: System | None = None
    try:
        settings = Settings(
            loop=LoopSettings(
                leader_id=leader_id,
                policy=policy,
                queues=queues,
                snapshot_every=args.snapshot_every,
                plugins=plugins,
            ),
            actuate=not args.no_actuator,
            watch_queues=queues is None,
            lease_ttl_s=args.lease_ttl,
            metrics_port=args.metrics_port,
            forecast_limit=args.forecast_limit,
            forecast_interval_ms=round(args.forecast_interval * 1000),
            webhook_argv=_webhook_argv(args, nats_url=jlog.url, data_dir=data_dir, queues=queues_path, nkey=webhook_nkey)
            if args.webhook
            else None,
        )
        try:
            system = await build(jlog, config, settings, stop=stop)
        except (ConfigError, ValueError) as err:
            print(f"kdispatch serve: invalid cluster configuration: {err}", file=sys.stderr)
            return 2
        await system.start()
        # The loop allocates thousands of short-lived objects per batch and the state is millions
        # of long-lived ones: a full collection walking them all stopped the loop for 70-180 ms
        # every second or so under load (bench/e2e.py). The policy: reconciler.edge.gcpolicy.
        gcpolicy.at_start()
        log.info("serving", nats=jlog.url, root=args.root, webhook=args.webhook, actuator=not args.no_actuator)
        return await system.wait()
    finally:
        stop.set()
        if system is not None:
            await system.stop()
        if url is None:
            url_file.unlink(missing_ok=True)
        await jlog.close()
        log.info("stopped")


def _install_signal_handlers(stop: asyncio.Event, log: Any) -> None:
    loop = asyncio.get_running_loop()

    def on_signal(signame: str) -> None:
        log.info("signal_received", signal=signame)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, on_signal, sig.name)


def _webhook_argv(
    args: argparse.Namespace, *, nats_url: str, data_dir: str, queues: str | None, nkey: str | None = None
) -> list[str]:
    argv = [sys.executable, "-m", "webhook", "--port", str(args.webhook_port), "--nats", nats_url]
    argv += ["--data-dir", data_dir]
    if nkey is not None:  # the embedded server's webhook user: its own identity, not ours
        argv += ["--nats-nkey", nkey]
    if args.config:
        argv += ["--config", args.config]
    if queues is not None:
        argv += ["--queues", queues]
    if args.root != "kd":
        argv += ["--root", args.root]
    return argv
