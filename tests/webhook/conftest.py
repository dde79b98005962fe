"""``python -m webhook`` as a real child process over HTTPS, against the session's nats-server."""

from __future__ import annotations

import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from eventlog.embedded import free_port
from tests.waiting import eventually_blocking


@dataclass
class Webhook:
    port: int
    ca: Path
    root: str
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))

    def connection(self) -> http.client.HTTPSConnection:
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ssl_context(), timeout=30)

    def request(self, method: str, path: str, *, body: bytes | None = None) -> tuple[int, bytes]:
        conn = self.connection()
        try:
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_webhook(
    *, nats_url: str | None, root: str, data_dir: Path, extra: list[str] | None = None, wait_ready: bool = True
) -> Webhook:
    port = free_port()
    log = data_dir / "webhook.log"
    argv = [sys.executable, "-m", "webhook", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--nats", nats_url] if nats_url else []
    argv += ["--root", root, *(extra or [])]
    argv += [] if "--config" in argv else ["--data-dir", str(data_dir)]
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=Path(__file__).parents[2], env={**os.environ})
    hook = Webhook(port=port, ca=data_dir / "webhook-tls" / "ca.crt", root=root, proc=proc, log=log)
    path = "/readyz" if wait_ready else "/healthz"

    def answers() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"python -m webhook exited with {proc.returncode}:\n{log.read_text()}")
        return hook.ca.exists() and hook.request("GET", path)[0] == 200

    try:
        eventually_blocking(
            answers, timeout_s=60, ignoring=(OSError, ssl.SSLError, http.client.HTTPException), what=f"webhook {path}"
        )
    except AssertionError as err:
        hook.stop()
        raise AssertionError(f"{err}\n{log.read_text()}") from None
    return hook


@pytest.fixture(scope="module")
def webhook(nats_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    """One webhook for the module, on its own log root (tests use distinct job names)."""
    hook = start_webhook(
        nats_url=nats_url,
        root=f"wh{uuid.uuid4().hex[:10]}",
        data_dir=tmp_path_factory.mktemp("webhook"),
        extra=["--priority-classes", "high=1000", "--max-body-bytes", str(1 << 20), "--read-timeout", "1"],
    )
    yield hook
    assert hook.stop() == 0, hook.log.read_text()


def review(obj: dict[str, Any] | None, *, uid: str, operation: str = "CREATE", dry_run: bool = False, old: dict[str, Any] | None = None) -> bytes:
    source = obj if obj is not None else old
    assert source is not None
    group, _, version = source["apiVersion"].rpartition("/")
    request = {
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": source["kind"]},
        "operation": operation,
        "namespace": source["metadata"].get("namespace", ""),
        "name": source["metadata"].get("name", ""),
        "userInfo": {"username": "alice"},
        "object": obj,
        "oldObject": old,
        "dryRun": dry_run,
    }
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()
