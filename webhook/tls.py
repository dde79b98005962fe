"""Serving certificates: from files (reloaded when they change on disk, as cert-manager rotates
them), or, with none given, a self-signed CA and serving certificate for development, with the CA
bundle written next to them for the WebhookConfiguration's ``caBundle``."""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
from collections.abc import Sequence
from pathlib import Path

import structlog
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

log = structlog.get_logger("webhook.tls")

DEFAULT_SANS = ("localhost", "127.0.0.1")


class TlsError(RuntimeError):
    pass


class CertFiles:
    """A server SSLContext whose certificate follows ``cert``/``key`` on disk.

    ``reload_if_changed`` (called periodically by the server) loads the new pair into the same
    context, so new handshakes use it while open connections keep theirs. A half-written pair
    (cert and key not matching yet) is ignored until the next check.
    """

    def __init__(self, cert: str | Path, key: str | Path) -> None:
        self.cert = Path(cert)
        self.key = Path(key)
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._stamp: tuple[float, float, int, int] | None = None
        if not self.reload_if_changed():
            raise TlsError(f"cannot load the TLS certificate {self.cert} and key {self.key}")

    def _current_stamp(self) -> tuple[float, float, int, int]:
        c, k = os.stat(self.cert), os.stat(self.key)
        return (c.st_mtime, k.st_mtime, c.st_ino, k.st_ino)

    def reload_if_changed(self) -> bool:
        """True when a new pair was loaded."""
        try:
            stamp = self._current_stamp()
        except OSError as err:
            log.warning("tls_files_missing", cert=str(self.cert), key=str(self.key), error=str(err))
            return False
        if stamp == self._stamp:
            return False
        try:
            self.context.load_cert_chain(self.cert, self.key)
        except (ssl.SSLError, OSError) as err:
            log.warning("tls_reload_failed", cert=str(self.cert), error=str(err))
            return False
        self._stamp = stamp
        log.info("tls_loaded", cert=str(self.cert))
        return True


def _write(path: Path, data: bytes, *, private: bool = False) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    if private:
        tmp.chmod(0o600)
    tmp.replace(path)


def _san_entries(names: Sequence[str]) -> list[x509.GeneralName]:
    out: list[x509.GeneralName] = []
    for name in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            out.append(x509.DNSName(name))
    return out


def _covers(cert_path: Path, names: Sequence[str]) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound):
        return False
    have = {str(v) for v in sans.get_values_for_type(x509.DNSName)} | {
        str(v) for v in sans.get_values_for_type(x509.IPAddress)
    }
    fresh = cert.not_valid_after_utc > dt.datetime.now(dt.UTC) + dt.timedelta(days=30)
    return fresh and set(names) <= have


def self_signed(directory: str | Path, *, names: Sequence[str] = DEFAULT_SANS) -> tuple[Path, Path, Path]:
    """(ca.crt, tls.crt, tls.key) under ``directory``, made once and reused while they cover
    ``names`` and are valid for 30 more days."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    ca_path, cert_path, key_path = root / "ca.crt", root / "tls.crt", root / "tls.key"
    if ca_path.exists() and key_path.exists() and _covers(cert_path, names):
        return ca_path, cert_path, key_path
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    # A distinct subject per CA: verifiers look CAs up by subject, and two dev CAs with one name
    # (one per data dir, or a regenerated one) would shadow each other.
    ca_name = x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, f"kdispatch webhook development CA {x509.random_serial_number():x}"[:64])]
    )
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(_san_entries(names)), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    _write(
        key_path,
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
        private=True,
    )
    _write(cert_path, cert.public_bytes(pem))
    _write(ca_path, ca.public_bytes(pem))
    log.info("tls_self_signed", ca=str(ca_path), names=list(names))
    return ca_path, cert_path, key_path
