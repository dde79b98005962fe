"""Who may do what on NATS: one nkey user per kdispatch component, least privilege each.

Components (``COMPONENTS``) and what their permissions allow, for one log root ``<root>``:

- ``reconciler``: the leader and the in-process cluster adapters. Publishes to the log
  (``<root>.log.>``) and the inbox (``<root>.in.>``), writes the lease KV, the snapshot object
  store, creates and updates the log's streams and buckets. Even it may not delete or purge the
  log or the inbox (denied explicitly: a deny beats an allow).
- ``webhook``: publishes ``JobSubmitted`` to ``<root>.in.webhook.>`` and reads the inbox
  stream's info; nothing else (no log, no lease, no stream creation).
- ``worker``: a worker-cluster adapter in its own process: ``<root>.in.worker.>`` only.
- ``reader``: inspection (``kdispatch log/replay/explain``, the ``nats`` CLI): stream info,
  ephemeral consumers, direct gets, core subscriptions on ``<root>.>``; no publish to any data
  subject, no stream or KV write.

Every user subscribes to its own reply inbox, ``_INBOX_<component>.>`` (``inbox_prefix``):
JetStream acks, API answers and consumer deliveries come there, and no user can listen to the
replies of another (with a shared ``_INBOX.>`` the webhook could read the log as it is delivered
to the reconciler).

Why nkeys (and not passwords or JWT accounts): the server's configuration holds only public
keys, which are not secrets (a ConfigMap may carry them), and the server never sees a seed
(it checks a signature of its nonce); JWT accounts would add an operator, a resolver and a
signing workflow for a fixed set of four users in one account. See docs/security.md.

The permission lists are written for and tested against nats-server (tests/security/).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

import nkeys

from eventlog.embedded import EmbeddedNats
from eventlog.jetstream.names import LogNames

COMPONENTS = ("reconciler", "webhook", "worker", "reader")
AUTH_DIR = "nats-auth"
SERVER_CONF = "auth.conf"



def inbox_prefix(component: str) -> str:
    """The reply-subject prefix ``component``'s connection uses (``connect(inbox_prefix=…)``)."""
    return f"_INBOX_{component}"


def new_seed() -> tuple[str, str]:
    """A fresh user nkey: (seed ``SU…``, public key ``U…``)."""
    seed = nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER)
    kp = nkeys.from_seed(bytearray(seed))
    public = kp.public_key.decode()
    kp.wipe()
    return seed.decode(), public


def public_key(seed: str) -> str:
    kp = nkeys.from_seed(bytearray(seed.strip().encode()))
    public: str = kp.public_key.decode()
    kp.wipe()
    return public


def _stream_api(stream: str) -> list[str]:
    """Every JetStream API call about one stream: ``STREAM.INFO.<s>``, ``DIRECT.GET.<s>``,
    ``CONSUMER.CREATE.<s>.…`` (two tokens before it) and ``STREAM.MSG.GET.<s>``,
    ``CONSUMER.MSG.NEXT.<s>.<c>`` (three)."""
    return [f"$JS.API.*.*.{stream}", f"$JS.API.*.*.{stream}.>", f"$JS.API.*.*.*.{stream}", f"$JS.API.*.*.*.{stream}.>"]


def _flow_control(stream: str) -> str:
    """The answers a push consumer's client owes the server (``$JS.FC.<stream>.…``): reading an
    object (a snapshot) is one, and with several MB in flight the server waits for them; without
    the right to send them the read stalls for good."""
    return f"$JS.FC.{stream}.>"


def _read_api(stream: str) -> list[str]:
    """What reading a stream takes: its info, ephemeral consumers and their pulls, single gets."""
    return [
        f"$JS.API.STREAM.INFO.{stream}",
        f"$JS.API.STREAM.MSG.GET.{stream}",
        f"$JS.API.DIRECT.GET.{stream}",
        f"$JS.API.DIRECT.GET.{stream}.>",
        f"$JS.API.CONSUMER.CREATE.{stream}",
        f"$JS.API.CONSUMER.CREATE.{stream}.>",
        f"$JS.API.CONSUMER.INFO.{stream}.*",
        f"$JS.API.CONSUMER.DELETE.{stream}.*",
        f"$JS.API.CONSUMER.MSG.NEXT.{stream}.*",
    ]


def permissions(component: str, root: str = "kd") -> dict[str, Any]:
    """The ``permissions`` block of ``component``'s user for the log ``root``."""
    names = LogNames(root)
    kv, obj = f"KV_{names.lease_bucket}", f"OBJ_{names.snapshot_bucket}"
    streams = [names.inbox_stream, names.log_stream, kv, obj]
    if component == "reconciler":
        return {
            "publish": {
                "allow": [
                    f"{names.inbox_prefix}.>",
                    f"{names.log_prefix}.>",
                    f"$KV.{names.lease_bucket}.>",
                    f"$O.{names.snapshot_bucket}.>",
                    "$JS.API.INFO",
                    "$JS.API.STREAM.NAMES",
                    "$JS.API.STREAM.LIST",
                    *(s for stream in streams for s in _stream_api(stream)),
                    *(_flow_control(stream) for stream in streams),
                ],
                # The log is append-only, the inbox a record until its age limit: no one deletes.
                "deny": [
                    f"$JS.API.STREAM.DELETE.{names.log_stream}",
                    f"$JS.API.STREAM.PURGE.{names.log_stream}",
                    f"$JS.API.STREAM.MSG.DELETE.{names.log_stream}",
                    f"$JS.API.STREAM.DELETE.{names.inbox_stream}",
                    f"$JS.API.STREAM.PURGE.{names.inbox_stream}",
                    f"$JS.API.STREAM.MSG.DELETE.{names.inbox_stream}",
                ],
            },
            "subscribe": {"allow": [f"{inbox_prefix(component)}.>"]},
        }
    if component in ("webhook", "worker"):
        return {
            "publish": {
                "allow": [f"{names.inbox_prefix}.{component}.>", f"$JS.API.STREAM.INFO.{names.inbox_stream}"]
            },
            "subscribe": {"allow": [f"{inbox_prefix(component)}.>"]},
        }
    if component == "reader":
        return {
            "publish": {
                "allow": [
                    "$JS.API.INFO",
                    "$JS.API.STREAM.NAMES",
                    "$JS.API.STREAM.LIST",
                    *(s for stream in streams for s in _read_api(stream)),
                    *(_flow_control(stream) for stream in streams),
                ]
            },
            "subscribe": {"allow": [f"{inbox_prefix(component)}.>", f"{root}.>"]},
        }
    raise ValueError(f"unknown component {component!r}; one of {', '.join(COMPONENTS)}")


def _conf_permissions(perms: dict[str, Any], indent: str) -> list[str]:
    lines = [f"{indent}permissions: {{"]
    for direction in ("publish", "subscribe"):
        lines.append(f"{indent}  {direction}: {{")
        for kind, subjects in perms.get(direction, {}).items():
            lines.append(f"{indent}    {kind}: [")
            lines += [f'{indent}      "{subject}"' for subject in subjects]
            lines.append(f"{indent}    ]")
        lines.append(f"{indent}  }}")
    lines.append(f"{indent}}}")
    return lines


def authorization_conf(users: dict[str, str], *, root: str = "kd") -> str:
    """nats-server configuration text: ``authorization`` with one nkey user per component
    (``users`` maps component to its public key, or to ``$VAR`` for a key from the environment)."""
    lines = ["authorization {", "  users = ["]
    for component, key in users.items():
        ref = key if key.startswith("$") else f'"{key}"'
        lines += [f"    # {component}", "    {", f"      nkey: {ref}"]
        lines += _conf_permissions(permissions(component, root), "      ")
        lines.append("    }")
    lines += ["  ]", "}", ""]
    return "\n".join(lines)


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)  # an existing file keeps its old mode through O_CREAT


class Credentials:
    """Per-component seed files and the server's authorization file under ``<data dir>/nats-auth``."""

    def __init__(self, data_dir: str | Path) -> None:
        self.dir = Path(data_dir) / AUTH_DIR

    def seed_file(self, component: str) -> Path:
        return self.dir / f"{component}.nk"

    @property
    def server_conf(self) -> Path:
        return self.dir / SERVER_CONF

    def exists(self) -> bool:
        return all(self.seed_file(c).is_file() for c in COMPONENTS)

    def ensure(self, *, root: str = "kd") -> Credentials:
        """Make the seeds that are missing (kept across restarts) and write the server's file for
        ``root``; everything 0600 in a 0700 directory."""
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        users: dict[str, str] = {}
        for component in COMPONENTS:
            path = self.seed_file(component)
            if path.is_file():
                users[component] = public_key(path.read_text())
            else:
                seed, users[component] = new_seed()
                _write_private(path, seed + "\n")
        _write_private(self.server_conf, authorization_conf(users, root=root))
        return self


async def secured_embedded(data_dir: str | Path, *, root: str = "kd") -> tuple[EmbeddedNats, Credentials]:
    """The embedded nats-server of ``kdispatch serve``: on loopback, with authorization (the
    seeds under ``<data dir>/nats-auth``, made on first use), started."""
    creds = Credentials(data_dir).ensure(root=root)
    server = EmbeddedNats(data_dir=data_dir, config_file=creds.server_conf)
    return await server.start_async(), creds


def kubernetes_secrets(namespace: str = "kdispatch-system") -> str:
    """Fresh users for deploy/ as Secret manifests (``kubectl apply -f -``): each component's
    seed in ``kdispatch-nats-<component>`` (key ``nkey.seed``) and the public keys the NATS
    servers read in ``kdispatch-nats-users``."""
    import json

    seeds = {c: new_seed() for c in COMPONENTS}

    def secret(name: str, data: dict[str, str]) -> str:
        meta = {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "kdispatch"}}
        body = {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque", "stringData": data}
        return json.dumps(body, indent=2)  # JSON is YAML: no YAML library needed here

    docs = [secret("kdispatch-nats-users", {c: public for c, (_, public) in seeds.items()})]
    docs += [secret(f"kdispatch-nats-{c}", {"nkey.seed": seed + "\n"}) for c, (seed, _) in seeds.items()]
    return "---\n".join(doc + "\n" for doc in docs)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m eventlog.natsauth", description="NATS users of kdispatch (docs/security.md)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    secrets_cmd = sub.add_parser("secrets", help="print new users as Kubernetes Secrets (for kubectl apply -f -)")
    secrets_cmd.add_argument("--namespace", default="kdispatch-system")
    conf_cmd = sub.add_parser("conf", help="print the nats-server authorization block for seeds in a data dir")
    conf_cmd.add_argument("--data-dir", default=".kdispatch")
    conf_cmd.add_argument("--root", default="kd")
    args = parser.parse_args(argv)
    if args.command == "secrets":
        print(kubernetes_secrets(args.namespace), end="")
    else:
        print(Credentials(args.data_dir).ensure(root=args.root).server_conf.read_text(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
