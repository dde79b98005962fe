"""The containers of deploy/ as local processes: the command and args of the rendered
Deployments, with only paths, ports and the NATS address changed for this machine."""

from __future__ import annotations

import contextlib
import re
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.deploy.conftest import REPO, find, one, rendered
from tests.waiting import eventually_blocking

OVERLAY = "overlays/self-signed"
SERVICE_HOST = "kdispatch-webhook.kdispatch-system.svc"


def container(name: str, overlay: str = OVERLAY) -> dict[str, Any]:
    (c,) = one(rendered(overlay), "Deployment", name)["spec"]["template"]["spec"]["containers"]
    return c


def shipped_config(path: Path, overlay: str = OVERLAY) -> Path:
    """The config.yaml of the rendered ConfigMap, written to ``path``."""
    (configmap,) = [
        o
        for o in find(rendered(overlay), "ConfigMap")
        if o["metadata"]["name"].startswith("kdispatch-config-")
    ]
    path.write_text(configmap["data"]["config.yaml"])
    return path


def _swap(args: list[str], swaps: dict[str, str]) -> list[str]:
    out = []
    for arg in args:
        flag, _, _ = arg.partition("=")
        out.append(
            f"{flag}={swaps[flag]}" if flag in swaps else arg.replace("$(POD_NAME)", "kdispatch-reconciler-0")
        )
    return out


def serve_argv(*, config: Path, nats_url: str, metrics_port: int, root: str) -> list[str]:
    """``kdispatch serve`` as the reconciler container runs it; test-only: this NATS, an isolated
    log, and no worker clusters to talk to."""
    c = container("kdispatch-reconciler")
    argv = [str(Path(sys.executable).parent / c["command"][0])]
    argv += _swap(c["args"], {"--config": str(config), "--metrics-port": str(metrics_port)})
    return [*argv, f"--nats={nats_url}", f"--root={root}", "--no-actuator"]


def webhook_argv(
    *, port: int, nats_url: str, data_dir: Path, certs: Path, config: Path, root: str
) -> list[str]:
    """``python -m webhook`` as the webhook container runs it, with the Secret's files in ``certs``."""
    c = container("kdispatch-webhook")
    swaps = {
        "--port": str(port),
        "--nats": nats_url,
        "--data-dir": str(data_dir),
        "--tls-cert": str(certs / "tls.crt"),
        "--tls-key": str(certs / "tls.key"),
        "--config": str(config),
    }
    return [sys.executable, *c["command"][1:], *_swap(c["args"], swaps), f"--root={root}", "--host=127.0.0.1"]


def documented_certificate_command() -> str:
    """The Python one-liner docs/deploy.md runs in the image to make the webhook's CA and cert."""
    text = (REPO / "docs" / "deploy.md").read_text()
    found = re.findall(r'python -c "(from webhook\.tls import self_signed; [^"]+)"', text)
    assert len(found) == 1, "docs/deploy.md: one certificate command for overlays/self-signed"
    return found[0]


def make_certs(directory: Path) -> Path:
    """Run the documented command with ``/certs`` mapped to ``directory``."""
    code = documented_certificate_command().replace("/certs", str(directory))
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, capture_output=True)
    return directory


def tls_context(ca: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = True
    return context


@contextlib.contextmanager
def resolve(names: set[str], address: str = "127.0.0.1") -> Iterator[None]:
    """Make ``names`` resolve to ``address`` in this process, like DNS records: connect to
    loopback, but verify the certificate for the Service's DNS name as the API server does."""
    original = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        return original(address if host in names else host, *args, **kwargs)

    socket.getaddrinfo = getaddrinfo
    try:
        yield
    finally:
        socket.getaddrinfo = original


def wait_status(
    url: str, *, context: ssl.SSLContext | None, proc: subprocess.Popen[bytes], timeout_s: float
) -> int:
    """The first 200 from ``url`` (retrying connection errors and non-200 answers)."""

    def status() -> int:
        if proc.poll() is not None:
            raise AssertionError(f"process exited with {proc.returncode} before {url} answered")
        with urllib.request.urlopen(url, context=context, timeout=2) as response:
            return int(response.status)

    # not listening yet, or 503 (an HTTPError, a URLError) until NATS answers
    result: int = eventually_blocking(
        status,
        timeout_s=timeout_s,
        interval_s=0.2,
        ignoring=(urllib.error.URLError, ConnectionError, ssl.SSLError, TimeoutError),
        what=f"200 from {url}",
    )
    return result


class Running:
    """A started process, its log file, and a clean stop."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self.log_path = log
        self._log = log.open("wb")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT)

    def tail(self, n: int = 3000) -> str:
        return self.log_path.read_text()[-n:]

    def stop(self) -> int:
        """SIGTERM, then the exit code (killed after 30 s)."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(timeout=10)
        self._log.close()
        return code
