"""``kdispatch serve``: the reconciler process (leader candidate + actuator + observers + metrics).

Composition root: everything ``serve`` runs is wired here and nowhere else.

- the leader candidate loop (``reconciler.shell.leader``): waits for the lease, then sequences;
- the actuator and the cluster observers (``reconciler.shell.clusters``), unless
  ``--no-actuator`` — several replicas may run them: they are idempotent;
- ``/metrics`` on ``--metrics-port``;
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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from reconciler.commands.argtypes import port, port_or_any, positive_float, positive_int

SHUTDOWN_GRACE_S = 15.0

HELP = "run the reconciler: leader election, sequencing, actuator, metrics (and the webhook)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="kdispatch config file (YAML)")
    parser.add_argument("--nats", metavar="URL", help="NATS server URL (default: the config's, else embedded)")
    parser.add_argument("--data-dir", metavar="DIR", help="data dir for the embedded nats-server (default .kdispatch)")
    parser.add_argument("--webhook", action="store_true", help="also run the admission webhook (child process)")
    parser.add_argument("--webhook-port", type=port, default=9443, metavar="P", help="webhook HTTPS port (9443)")
    parser.add_argument("--metrics-port", type=port_or_any, metavar="P", help="serve Prometheus /metrics on this port")
    parser.add_argument("--no-actuator", action="store_true", help="sequence and decide only; do not touch clusters")
    parser.add_argument("--leader-id", metavar="ID", help="this replica's name in the lease (default host-pid-rand)")
    parser.add_argument("--lease-ttl", type=positive_float, default=5.0, metavar="S", help="leader lease TTL in seconds (5)")
    parser.add_argument("--snapshot-every", type=positive_int, default=5000, metavar="N", help="entries between snapshots")
    parser.add_argument("--root", default="kd", metavar="NAME", help="which log on that server (default kd)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def default_leader_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


async def run_async(args: argparse.Namespace) -> int:
    # Imported here, not at the top: building the parser (`kdispatch serve --help`) must not load
    # the service (aiohttp, structlog, NATS, the leader loop).
    from reconciler import core
    from reconciler.config import ConfigError, load_config
    from reconciler.shell import logging as klog
    from reconciler.shell.child import Supervised
    from reconciler.shell.leader import run_candidate
    from reconciler.shell.logsource import URL_FILE
    from reconciler.shell.loop import LeaderLoop, LoopSettings
    from reconciler.shell.metrics import ReconcilerMetrics, start_metrics_server
    from reconciler.shell.natsopts import connect_options
    from reconciler.shell.policy import policy_event

    leader_id = args.leader_id or default_leader_id()
    klog.configure(level=args.log_level, role="serve", replica=leader_id)
    log = klog.get_logger("reconciler.serve")
    try:
        config = load_config(args.config)
        policy = policy_event(config.policy)
    except ConfigError as err:
        print(f"kdispatch serve: invalid config: {err}", file=sys.stderr)
        return 2
    problems = core.validate_policy(policy)
    if problems:  # an unknown plugin or bad plugin args: say which, before leading with it
        where = args.config or "the default config"
        print(f"kdispatch serve: invalid policy in {where}:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2
    from eventlog.jetstream import connect

    url = args.nats or config.nats.url
    data_dir = args.data_dir or config.data_dir
    try:
        jlog = await connect(
            url,
            data_dir=data_dir,
            root=args.root,
            name=f"kdispatch-serve-{leader_id}",
            **connect_options(config.nats),
        )
    except Exception as err:
        print(f"kdispatch serve: cannot open the log at {url or data_dir}: {err}", file=sys.stderr)
        return 1
    url_file = Path(data_dir) / URL_FILE
    if url is None:  # our embedded server: tell `kdispatch log/replay/explain` where it is
        url_file.write_text(jlog.url + "\n")
    stop = asyncio.Event()
    _install_signal_handlers(stop, log)
    metrics = ReconcilerMetrics()
    runner = None
    tasks: list[asyncio.Task[Any]] = []
    closers: list[Callable[[], Awaitable[None]]] = []
    try:
        clusters = None
        if not args.no_actuator:
            # Built before anything runs: a bad cluster entry must not leave a half-started server.
            from reconciler.shell.clusters.setup import ClusterSet

            try:
                clusters = await ClusterSet.from_config(config)
            except (ConfigError, ValueError) as err:
                print(f"kdispatch serve: invalid cluster configuration: {err}", file=sys.stderr)
                return 2
            closers.append(clusters.close)
        if args.metrics_port is not None:
            runner = await start_metrics_server(metrics, port=args.metrics_port, ready=lambda: jlog.nc.is_connected)
            log.info("metrics_listening", port=args.metrics_port)
        loop = LeaderLoop(
            jlog,
            LoopSettings(leader_id=leader_id, policy=policy, snapshot_every=args.snapshot_every),
            metrics=metrics,
        )
        tasks.append(
            asyncio.create_task(
                run_candidate(jlog, loop, stop=stop, ttl_s=args.lease_ttl), name="leader-candidate"
            )
        )
        if clusters is not None:
            tasks.append(
                asyncio.create_task(
                    clusters.run(inbox=jlog.inbox, reader=jlog.reader, stop=stop, registry=metrics.registry),
                    name="clusters",
                )
            )
        if args.webhook:
            argv = _webhook_argv(args, nats_url=jlog.url, data_dir=data_dir)
            child = Supervised("webhook", argv, on_restart=metrics.webhook_restarts.inc)
            tasks.append(asyncio.create_task(child.run(stop), name="webhook"))
        log.info("serving", nats=jlog.url, root=args.root, webhook=args.webhook, actuator=not args.no_actuator)
        return await _wait(tasks, stop, log=log)
    finally:
        stop.set()
        # Components wind down on ``stop`` (release the lease, terminate the webhook); only one
        # that does not within the grace period is cancelled.
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=SHUTDOWN_GRACE_S)
            for task in late:
                log.warning("component_cancelled", component=task.get_name(), grace_s=SHUTDOWN_GRACE_S)
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if runner is not None:
            await runner.cleanup()
        for close in closers:
            await close()
        if url is None:
            url_file.unlink(missing_ok=True)
        await jlog.close()
        log.info("stopped")


async def _wait(tasks: list[asyncio.Task[Any]], stop: asyncio.Event, *, log: Any) -> int:
    """Until stop (0), or until a component fails (1: a dead component is not a running server)."""
    stopper = asyncio.ensure_future(stop.wait())
    try:
        done, _ = await asyncio.wait({*tasks, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    for task in done:
        if task is stopper or task.cancelled():
            continue
        err = task.exception()
        if err is not None:
            log.error("component_failed", component=task.get_name(), error=repr(err), exc_info=err)
            return 1
        if not stop.is_set():
            log.error("component_exited", component=task.get_name())
            return 1
    return 0


def _install_signal_handlers(stop: asyncio.Event, log: Any) -> None:
    loop = asyncio.get_running_loop()

    def on_signal(signame: str) -> None:
        log.info("signal_received", signal=signame)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, on_signal, sig.name)


def _webhook_argv(args: argparse.Namespace, *, nats_url: str, data_dir: str) -> list[str]:
    argv = [sys.executable, "-m", "webhook", "--port", str(args.webhook_port), "--nats", nats_url]
    argv += ["--data-dir", data_dir]
    if args.config:
        argv += ["--config", args.config]
    if args.root != "kd":
        argv += ["--root", args.root]
    return argv
