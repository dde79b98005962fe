"""The webhook container's command and args are the webhook's own (served for real in
test_manager_path.py)."""

from __future__ import annotations

from tests.deploy.conftest import one, rendered
from tests.deploy.processes import (
    container,
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
    assert args.nats == "tls://nats:4222", "the Service of deploy/nats, over TLS"
    service = one(rendered("overlays/self-signed"), "Service", "nats")
    assert service["spec"]["ports"][0]["port"] == 4222
