"""A throwaway PKI for TLS tests: a CA, a server certificate for 127.0.0.1/localhost and a client
certificate, as PEM files in a directory; and the nats-server arguments that require them."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


def _issue(
    *, name: str, issuer_key: ec.EllipticCurvePrivateKey, issuer: x509.Name | None, ca: bool, path: Path
) -> tuple[ec.EllipticCurvePrivateKey, x509.Name]:
    key = issuer_key if issuer is None else ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer or subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
    cert = builder.sign(issuer_key, hashes.SHA256())
    path.with_suffix(".pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(path.with_suffix(".key"), key)
    return key, subject


def make_pki(tmp_path: Path) -> Path:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    _, ca_name = _issue(name="kd-test-ca", issuer_key=ca_key, issuer=None, ca=True, path=tmp_path / "ca")
    _issue(name="nats-server", issuer_key=ca_key, issuer=ca_name, ca=False, path=tmp_path / "server")
    _issue(name="kdispatch", issuer_key=ca_key, issuer=ca_name, ca=False, path=tmp_path / "client")
    return tmp_path


def server_tls_args(pki: Path) -> list[str]:
    """nats-server flags: TLS with the server certificate, client certificates required."""
    return [
        "--tlscert", str(pki / "server.pem"),
        "--tlskey", str(pki / "server.key"),
        "--tlscacert", str(pki / "ca.pem"),
        "--tlsverify",
    ]  # fmt: skip
