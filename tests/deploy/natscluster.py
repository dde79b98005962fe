"""The NATS overlay as it would run on this machine: three nats-servers started from the shipped
nats.conf and auth.conf, with only addresses and paths moved (loopback ports, a temp dir, a
throwaway PKI in place of the TLS Secret, fresh users' public keys in the environment as the
StatefulSet passes them), each waited for on the StatefulSet's own probe paths."""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from eventlog.embedded import find_binary
from eventlog.jetstream import TlsFiles
from eventlog.natsauth import COMPONENTS, Credentials, inbox_prefix, public_key
from tests.deploy.conftest import find, one, rendered
from tests.eventlog.pki import make_pki
from tests.waiting import eventually_blocking

OVERLAY = "overlays/cert-manager"


def statefulset() -> dict[str, Any]:
    return one(rendered(OVERLAY), "StatefulSet", "nats")


def nats_conf(name: str = "nats.conf") -> str:
    (configmap,) = [
        o for o in find(rendered(OVERLAY), "ConfigMap") if o["metadata"]["name"].startswith("nats-config-")
    ]
    text: str = configmap["data"][name]
    return text


def container() -> dict[str, Any]:
    (container,) = statefulset()["spec"]["template"]["spec"]["containers"]
    return container


def container_ports() -> dict[str, int]:
    return {p["name"]: p["containerPort"] for p in container()["ports"]}


def container_mounts() -> dict[str, str]:
    return {m["name"]: m["mountPath"] for m in container()["volumeMounts"]}


def local_conf(
    conf: str, *, node: int, client: int, monitor: int, clusters: list[int], root: Path, pki: Path
) -> str:
    """The shipped conf with addresses and paths moved: loopback ports, temp dirs, local PEMs."""
    ports, mounts = container_ports(), container_mounts()
    service = statefulset()["spec"]["serviceName"]
    swaps = {
        f"listen: 0.0.0.0:{ports['client']}": f"listen: 127.0.0.1:{client}",
        f"http_port: {ports['monitor']}": f"http: 127.0.0.1:{monitor}",
        f"store_dir: {mounts['data']}": f"store_dir: {root / 'data'}",
        f"pid_file: {mounts['pid']}/nats.pid": f"pid_file: {root / 'nats.pid'}",
        f"listen: 0.0.0.0:{ports['cluster']}": f"listen: 127.0.0.1:{clusters[node]}",
    }
    for i, port in enumerate(clusters):
        swaps[f"nats://nats-{i}.{service}:{ports['cluster']}"] = f"nats://127.0.0.1:{port}"
    tls = mounts["tls"]
    swaps |= {f"{tls}/tls.crt": str(pki / "server.pem"), f"{tls}/tls.key": str(pki / "server.key")}
    swaps[f"{tls}/ca.crt"] = str(pki / "ca.pem")
    for old, new in swaps.items():
        assert old in conf, old
        conf = conf.replace(old, new)
    return conf


class ServerExited(AssertionError):
    """A nats-server ended while it was waited for; ``log`` is the end of what it wrote."""

    def __init__(self, url: str, code: int, log: str) -> None:
        super().__init__(f"nats-server exited with {code} before {url} answered; the end of its log:\n{log}")
        self.log = log

    @property
    def port_taken(self) -> bool:
        return "address already in use" in self.log


def wait_http(
    url: str, *, timeout_s: float, proc: subprocess.Popen[bytes] | None = None, log: Path | None = None
) -> None:
    def ok() -> bool:
        if proc is not None and proc.poll() is not None:
            raise ServerExited(url, proc.returncode, _tail(log) if log is not None else "(not kept)")
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)

    # not up yet: refused, reset, an error status (HTTPError is an OSError), a half-written answer
    errors = (OSError, http.client.HTTPException)
    eventually_blocking(ok, timeout_s=timeout_s, interval_s=0.2, ignoring=errors, what=f"200 from {url}")


class NatsCluster:
    def __init__(
        self,
        *,
        urls: list[str],
        monitors: list[str],
        procs: list[subprocess.Popen[bytes]],
        pki: Path,
        users: Credentials,
    ) -> None:
        self.urls = urls
        self.monitors = monitors  # http://127.0.0.1:<monitor port> of each server
        self.procs = procs
        self.pki = pki  # ca.pem, server.pem/.key, client.pem/.key
        self.users = users  # a seed per component

    def tls(self) -> TlsFiles:
        return TlsFiles(ca=str(self.pki / "ca.pem"), cert=str(self.pki / "client.pem"), key=str(self.pki / "client.key"))

    def options(self, component: str) -> dict[str, Any]:
        """``connect()`` options for ``component``'s user (and, for producers, what it may do)."""
        options: dict[str, Any] = {
            "nkey": self.users.seed_file(component),
            "tls": self.tls(),
            "inbox_prefix": inbox_prefix(component),
        }
        if component in ("webhook", "worker"):
            options |= {"create_streams": False, "source": component}
        return options

    def config_for(self, shipped: str, component: str) -> str:
        """The shipped config as ``component``'s pod sees it: its own seed and client certificate
        (the Deployment's Secrets) where the config says they are mounted."""
        config = yaml.safe_load(shipped)
        tls = self.tls()
        config["nats"]["nkey"] = str(self.users.seed_file(component))
        config["nats"]["tls"] = {"ca": tls.ca, "cert": tls.cert, "key": tls.key}
        return yaml.safe_dump(config, sort_keys=False)


START_ATTEMPTS = 3


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports that were free a moment ago (all held open while picked, so the OS
    cannot hand out one twice)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(n)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


@contextlib.contextmanager
def shipped_nats_cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    """Three nats-servers from the shipped conf, for as long as the context lasts.

    Their ports are picked free, then bound by the servers a moment later: in between, another
    process (a parallel test's server, or an outgoing connection given that port) can take one,
    and that server exits. The cluster is then started again on fresh ports; any other exit is
    reported with the end of the server's log."""
    (tmp_path / "pki").mkdir(parents=True)
    pki = make_pki(tmp_path / "pki")
    users = Credentials(tmp_path / "users").ensure()
    for attempt in range(1, START_ATTEMPTS + 1):
        procs: list[subprocess.Popen[bytes]] = []
        try:
            cluster = _start(tmp_path / f"start-{attempt}", procs, pki=pki, users=users)
        except ServerExited as err:
            _stop(procs)
            if not err.port_taken or attempt == START_ATTEMPTS:
                raise
            continue
        except BaseException:
            _stop(procs)
            raise
        try:
            yield cluster
        finally:
            _stop(procs)
        return


def _start(root: Path, procs: list[subprocess.Popen[bytes]], *, pki: Path, users: Credentials) -> NatsCluster:
    """Start the servers (appended to ``procs`` as they start) and wait until each is healthy."""
    replicas = statefulset()["spec"]["replicas"]
    ports = free_ports(3 * replicas)
    clients, monitors, clusters = ports[:replicas], ports[replicas : 2 * replicas], ports[2 * replicas :]
    # What the StatefulSet's env gives the servers from the Secret kdispatch-nats-users.
    keys = {f"KD_NKEY_{c.upper()}": public_key(users.seed_file(c).read_text()) for c in COMPONENTS}
    logs: list[Path] = []
    for node in range(replicas):
        node_root = root / f"nats-{node}"
        node_root.mkdir(parents=True)
        conf = node_root / "nats.conf"
        conf.write_text(
            local_conf(
                nats_conf(),
                node=node,
                client=clients[node],
                monitor=monitors[node],
                clusters=clusters,
                root=node_root,
                pki=pki,
            )
        )
        (node_root / "auth.conf").write_text(nats_conf("auth.conf"))  # the ConfigMap's other file
        env = {**os.environ, "SERVER_NAME": f"nats-{node}", **keys}
        logs.append(node_root / "server.log")
        with logs[-1].open("wb") as log:
            procs.append(
                subprocess.Popen([str(find_binary()), "--config", str(conf)], env=env, stdout=log, stderr=log)
            )
    probes = {
        name: container()[name]["httpGet"]["path"] for name in ("startupProbe", "readinessProbe", "livenessProbe")
    }
    for node, proc in enumerate(procs):
        for path in probes.values():
            wait_http(f"http://127.0.0.1:{monitors[node]}{path}", timeout_s=60, proc=proc, log=logs[node])
    # The probes pass before the JetStream cluster has a meta leader; the plain /healthz
    # waits for that too (in Kubernetes, a client that comes too early restarts and retries).
    for node, proc in enumerate(procs):
        wait_http(f"http://127.0.0.1:{monitors[node]}/healthz", timeout_s=60, proc=proc, log=logs[node])
    return NatsCluster(
        urls=[f"tls://127.0.0.1:{port}" for port in clients],
        monitors=[f"http://127.0.0.1:{port}" for port in monitors],
        procs=procs,
        pki=pki,
        users=users,
    )


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        proc.kill()
        proc.wait(timeout=30)
