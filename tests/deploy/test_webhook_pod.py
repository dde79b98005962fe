"""The webhook container as deployed: its args are the webhook's, and with a certificate made the way
docs/deploy.md says (overlays/self-signed), it serves HTTPS that verifies against the CA bundle
for the Service's DNS name, exactly what the API server checks before sending a review."""

from __future__ import annotations

import re
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from eventlog.embedded import free_port
from tests.deploy.conftest import REPO, find, one, rendered
from webhook.__main__ import build_parser

SERVICE_HOST = "kdispatch-webhook.kdispatch-system.svc"


def container(overlay: str = "overlays/self-signed") -> dict[str, Any]:
    (c,) = one(rendered(overlay), "Deployment", "kdispatch-webhook")["spec"]["template"]["spec"]["containers"]
    return c


def test_args_are_the_webhooks_own() -> None:
    c = container()
    assert c["command"] == ["python", "-m", "webhook"]
    args = build_parser().parse_args(c["args"])
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    # kubernetes.io/tls Secrets (cert-manager's included) hold tls.crt and tls.key.
    assert (args.tls_cert, args.tls_key) == (f"{mounts['tls']}/tls.crt", f"{mounts['tls']}/tls.key")
    assert args.data_dir == mounts["data"]
    assert args.nats == "nats://nats:4222", "the Service of deploy/nats"
    service = one(rendered("overlays/self-signed"), "Service", "nats")
    assert service["spec"]["ports"][0]["port"] == 4222


def documented_certificate_command() -> str:
    """The Python one-liner docs/deploy.md runs in the image to make the webhook's CA and cert."""
    text = (REPO / "docs" / "deploy.md").read_text()
    found = re.findall(r'python -c "(from webhook\.tls import self_signed; [^"]+)"', text)
    assert len(found) == 1, "docs/deploy.md: one certificate command for overlays/self-signed"
    return found[0]


def _wait(url: str, context: ssl.SSLContext, *, proc: subprocess.Popen[bytes], timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"webhook exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, context=context, timeout=2) as response:
                return int(response.status)
        except (urllib.error.URLError, ConnectionError, ssl.SSLError, TimeoutError) as err:
            last = err  # not listening yet, or 503 until NATS answers
        time.sleep(0.2)
    raise AssertionError(f"{url}: {last}")


def _context(ca: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = True
    return context


def test_self_signed_certificate_serves_what_the_api_server_trusts(
    tmp_path: Path, shipped_nats: list[str], log_root: str
) -> None:
    certs = tmp_path / "certs"
    code = documented_certificate_command().replace("/certs", str(certs))
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, capture_output=True)
    ca, cert, key = certs / "ca.crt", certs / "tls.crt", certs / "tls.key"
    assert ca.is_file() and cert.is_file() and key.is_file()

    c = container()
    port = free_port()
    swaps = {
        "--port": str(port),
        "--nats": shipped_nats[0],
        "--data-dir": str(tmp_path / "data"),
        "--tls-cert": str(cert),
        "--tls-key": str(key),
        "--config": str(tmp_path / "config.yaml"),
    }
    (configmap,) = [
        o
        for o in find(rendered("overlays/self-signed"), "ConfigMap")
        if o["metadata"]["name"].startswith("kdispatch-config-")
    ]
    (tmp_path / "config.yaml").write_text(configmap["data"]["config.yaml"])
    args = []
    for arg in c["args"]:
        flag, _, _ = arg.partition("=")
        args.append(f"{flag}={swaps[flag]}" if flag in swaps else arg)
    argv = [sys.executable, *c["command"][1:], *args, f"--root={log_root}", "--host=127.0.0.1"]
    log = (tmp_path / "webhook.log").open("wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        # Connect to loopback but verify the certificate for the Service's DNS name, as the API
        # server does for clientConfig.service: the name resolves to loopback in this process.
        context = _context(ca)
        with _resolve(SERVICE_HOST, "127.0.0.1"):
            for probe in ("readinessProbe", "livenessProbe"):
                path = c[probe]["httpGet"]["path"]
                status = _wait(f"https://{SERVICE_HOST}:{port}{path}", context, proc=proc, timeout_s=30)
                assert status == 200, (probe, status)
            # A certificate for another name is refused: the check is real.
            with pytest.raises(urllib.error.URLError, match=r"certificate|hostname"):
                urllib.request.urlopen(
                    f"https://localhost.invalid.kdispatch:{port}/healthz", context=context, timeout=5
                )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, (tmp_path / "webhook.log").read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


class _resolve:
    """Make ``host`` (and one invalid name) resolve to ``address`` in this process, like a DNS entry."""

    def __init__(self, host: str, address: str) -> None:
        self.names = {host, "localhost.invalid.kdispatch"}
        self.address = address

    def __enter__(self) -> None:
        import socket

        self._original = socket.getaddrinfo

        def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
            return self._original(self.address if host in self.names else host, *args, **kwargs)

        socket.getaddrinfo = getaddrinfo

    def __exit__(self, *exc: object) -> None:
        import socket

        socket.getaddrinfo = self._original
