"""The NATS overlay as it would run on this machine: three nats-servers started from the shipped
nats.conf and auth.conf, with only addresses and paths moved (loopback ports, a temp dir, a
throwaway PKI in place of the TLS Secret, fresh users' public keys in the environment as the
StatefulSet passes them), each waited for on the StatefulSet's own probe paths."""

from __future__ import annotations

import contextlib
import http.client
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from eventlog.embedded import find_binary, free_port
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


def wait_http(url: str, *, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    def ok() -> bool:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process exited with {proc.returncode} before {url} answered")
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


@contextlib.contextmanager
def shipped_nats_cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    """Three nats-servers from the shipped conf, for as long as the context lasts."""
    replicas = statefulset()["spec"]["replicas"]
    clients = [free_port() for _ in range(replicas)]
    monitors = [free_port() for _ in range(replicas)]
    clusters = [free_port() for _ in range(replicas)]
    procs: list[subprocess.Popen[bytes]] = []
    (tmp_path / "pki").mkdir(parents=True)
    pki = make_pki(tmp_path / "pki")
    users = Credentials(tmp_path / "users").ensure()
    # What the StatefulSet's env gives the servers from the Secret kdispatch-nats-users.
    keys = {f"KD_NKEY_{c.upper()}": public_key(users.seed_file(c).read_text()) for c in COMPONENTS}
    try:
        for node in range(replicas):
            root = tmp_path / f"nats-{node}"
            root.mkdir(parents=True)
            conf = root / "nats.conf"
            conf.write_text(
                local_conf(
                    nats_conf(),
                    node=node,
                    client=clients[node],
                    monitor=monitors[node],
                    clusters=clusters,
                    root=root,
                    pki=pki,
                )
            )
            (root / "auth.conf").write_text(nats_conf("auth.conf"))  # the ConfigMap's other file
            env = {**os.environ, "SERVER_NAME": f"nats-{node}", **keys}
            log = (root / "server.log").open("wb")
            procs.append(
                subprocess.Popen([str(find_binary()), "--config", str(conf)], env=env, stdout=log, stderr=log)
            )
        probes = {
            name: container()[name]["httpGet"]["path"]
            for name in ("startupProbe", "readinessProbe", "livenessProbe")
        }
        for node, proc in enumerate(procs):
            for path in probes.values():
                wait_http(f"http://127.0.0.1:{monitors[node]}{path}", timeout_s=60, proc=proc)
        # The probes pass before the JetStream cluster has a meta leader; the plain /healthz
        # waits for that too (in Kubernetes, a client that comes too early restarts and retries).
        for node, proc in enumerate(procs):
            wait_http(f"http://127.0.0.1:{monitors[node]}/healthz", timeout_s=60, proc=proc)
        yield NatsCluster(
            urls=[f"tls://127.0.0.1:{port}" for port in clients],
            monitors=[f"http://127.0.0.1:{port}" for port in monitors],
            procs=procs,
            pki=pki,
            users=users,
        )
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=30)
