"""Test-only: a NATS operator, account and user (nkeys + JWTs) and the user's ``.creds`` file,
so a real nats-server in operator mode can check kdispatch's credentials-file login."""

from __future__ import annotations

import base64
import json
import os
import time
from pathlib import Path
from typing import Any

import nkeys


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def keypair(prefix: int) -> nkeys.KeyPair:
    return nkeys.from_seed(nkeys.encode_seed(os.urandom(32), prefix))


def public(kp: nkeys.KeyPair) -> str:
    key: bytes = kp.public_key
    return key.decode()


def jwt(*, signer: nkeys.KeyPair, subject: str, name: str, nats: dict[str, Any]) -> str:
    header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    claims = {
        "jti": base64.b32encode(os.urandom(20)).decode().rstrip("="),
        "iat": int(time.time()),
        "iss": public(signer),
        "name": name,
        "sub": subject,
        "nats": nats,
    }
    body = _b64(json.dumps(claims).encode())
    signature = _b64(signer.sign(f"{header}.{body}".encode()))
    return f"{header}.{body}.{signature}"


def operator_setup(directory: Path) -> tuple[Path, Path]:
    """Writes ``server.conf`` (operator mode, account preloaded, JetStream allowed) and
    ``user.creds``; returns their paths."""
    operator = keypair(nkeys.PREFIX_BYTE_OPERATOR)
    account = keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    system = keypair(nkeys.PREFIX_BYTE_ACCOUNT)  # JetStream needs the server's system account
    user = keypair(nkeys.PREFIX_BYTE_USER)
    operator_jwt = jwt(
        signer=operator, subject=public(operator), name="kd-test", nats={"type": "operator", "version": 2}
    )
    unlimited = {
        "subs": -1,
        "data": -1,
        "payload": -1,
        "imports": -1,
        "exports": -1,
        "wildcards": True,
        "conn": -1,
        "leaf": -1,
    }
    jetstream = {"mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1}
    account_jwt = jwt(
        signer=operator,
        subject=public(account),
        name="KD",
        nats={"limits": {**unlimited, **jetstream}, "type": "account", "version": 2},
    )
    system_jwt = jwt(
        signer=operator,
        subject=public(system),
        name="SYS",
        nats={"limits": unlimited, "type": "account", "version": 2},
    )
    user_jwt = jwt(
        signer=account,
        subject=public(user),
        name="kdispatch",
        nats={"pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1, "type": "user", "version": 2},
    )
    conf = directory / "server.conf"
    conf.write_text(
        f'operator: "{operator_jwt}"\n'
        f"system_account: {public(system)}\n"
        "resolver: MEMORY\n"
        f'resolver_preload: {{\n  {public(account)}: "{account_jwt}"\n  {public(system)}: "{system_jwt}"\n}}\n'
    )
    creds = directory / "user.creds"
    creds.write_text(
        "-----BEGIN NATS USER JWT-----\n"
        f"{user_jwt}\n"
        "------END NATS USER JWT------\n\n"
        "-----BEGIN USER NKEY SEED-----\n"
        f"{user.seed.decode()}\n"
        "------END USER NKEY SEED------\n"
    )
    return conf, creds
