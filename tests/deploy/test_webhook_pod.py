"""The webhook container as deployed: its args are the webhook's, and with a certificate made the way
docs/deploy.md says (overlays/self-signed), it serves HTTPS that verifies against the CA bundle
for the Service's DNS name, exactly what the API server checks before sending a review."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest

from eventlog.embedded import free_port
from tests.deploy.conftest import one, rendered
from tests.deploy.processes import (
    SERVICE_HOST,
    Running,
    container,
    make_certs,
    resolve,
    shipped_config,
    tls_context,
    wait_status,
    webhook_argv,
)
from webhook.__main__ import build_parser


def test_args_are_the_webhooks_own() -> None:
    c = container("kdispatch-webhook")
    assert c["command"] == ["python", "-m", "webhook"]
    args = build_parser().parse_args(c["args"])
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    # kubernetes.io/tls Secrets (cert-manager's included) hold tls.crt and tls.key.
    assert (args.tls_cert, args.tls_key) == (f"{mounts['tls']}/tls.crt", f"{mounts['tls']}/tls.key")
    assert args.data_dir == mounts["data"]
    assert args.nats == "nats://nats:4222", "the Service of deploy/nats"
    service = one(rendered("overlays/self-signed"), "Service", "nats")
    assert service["spec"]["ports"][0]["port"] == 4222


def test_self_signed_certificate_serves_what_the_api_server_trusts(
    tmp_path: Path, shipped_nats: list[str], log_root: str
) -> None:
    certs = make_certs(tmp_path / "certs")
    assert all((certs / name).is_file() for name in ("ca.crt", "tls.crt", "tls.key"))
    port = free_port()
    argv = webhook_argv(
        port=port,
        nats_url=shipped_nats[0],
        data_dir=tmp_path / "data",
        certs=certs,
        config=shipped_config(tmp_path / "config.yaml"),
        root=log_root,
    )
    webhook = Running(argv, tmp_path / "webhook.log")
    try:
        context = tls_context(certs / "ca.crt")
        c = container("kdispatch-webhook")
        with resolve({SERVICE_HOST, "localhost.invalid.kdispatch"}):
            for probe in ("readinessProbe", "livenessProbe"):
                path = c[probe]["httpGet"]["path"]
                url = f"https://{SERVICE_HOST}:{port}{path}"
                assert wait_status(url, context=context, proc=webhook.proc, timeout_s=30) == 200, (
                    webhook.tail()
                )
            # A certificate for another name is refused: the check is real.
            with pytest.raises(urllib.error.URLError, match=r"certificate|hostname"):
                urllib.request.urlopen(
                    f"https://localhost.invalid.kdispatch:{port}/healthz", context=context, timeout=5
                )
    finally:
        code = webhook.stop()
    assert code == 0, webhook.tail()
