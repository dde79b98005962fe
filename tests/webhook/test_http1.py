"""The webhook's own HTTP/1.1 server (``webhook.http1``), spoken to byte by byte over TLS: what an
API server, a probe or a misbehaving peer can send, and what each gets back."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import socket
import ssl
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from eventlog.kube import names
from tests.webhook.conftest import Webhook, review
from webhook import admit, jsonpatch
from webhook.http1 import Connection, Exchange, Reply, Respond, error
from webhook.review import decode_review


def _job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "team-a", "labels": {names.QUEUE_LABEL: "user-queue"}},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "x"}]}}},
    }


def _held(name: str) -> dict[str, Any]:
    """The job as the API server sends it to /validate: after /mutate's patch (held, placed), so
    that its review is answered only once the inbox acknowledged its JobSubmitted."""
    obj = _job(name)
    outcome = admit.mutate(decode_review(review(obj, uid="m"))[1], admit.Settings())
    assert outcome.allowed and outcome.response.patch is not None, outcome.response
    held = jsonpatch.apply(obj, json.loads(base64.b64decode(outcome.response.patch)))
    held["metadata"]["uid"] = f"obj-{name}"
    return held


@contextmanager
def _tls(hook: Webhook) -> Iterator[ssl.SSLSocket]:
    raw = socket.create_connection(("127.0.0.1", hook.port))
    with hook.ssl_context().wrap_socket(raw, server_hostname="localhost") as tls:
        tls.settimeout(30)
        yield tls


class _Reader:
    """Responses off one connection, in order: (status, headers with lowered names, body)."""

    def __init__(self, tls: ssl.SSLSocket) -> None:
        self.tls = tls
        self.buf = b""

    def _fill(self) -> bool:
        data = self.tls.recv(65536)
        self.buf += data
        return bool(data)

    def response(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buf:
            assert self._fill(), f"connection closed before a response; got {self.buf!r}"
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))  # none on 100 Continue
        while len(self.buf) < length:
            assert self._fill(), "connection closed inside a response body"
        body, self.buf = self.buf[:length], self.buf[length:]
        return status, headers, body

    def closed(self) -> bool:
        """The server closed the connection (after everything it sent was read)."""
        try:
            return not self._fill() and not self.buf
        except (ConnectionResetError, ssl.SSLError):
            return True


def _post(path: str, body: bytes, *extra: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: webhook", "Content-Type: application/json", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def _chunked(path: str, body: bytes, *, size: int = 1000) -> bytes:
    chunks = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(body[i : i + size]), body[i : i + size]) for i in range(0, len(body), size))
    head = f"POST {path} HTTP/1.1\r\nHost: webhook\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    return head + chunks + b"0\r\nX-Trailer: t\r\n\r\n"


def _uid(answer: bytes) -> str:
    return str(json.loads(answer)["response"]["uid"])


def test_keep_alive_and_pipelined_requests_are_answered_in_order(webhook: Webhook) -> None:
    """One connection, as the API server keeps it: requests back to back, then several written at
    once (pipelined), one of them a /validate that waits on its inbox ack: answers come in order."""
    name = f"ka-{uuid.uuid4().hex[:6]}"
    with _tls(webhook) as tls:
        reader = _Reader(tls)
        for i in range(3):
            tls.sendall(_post("/mutate?timeout=10s", review(_job(f"{name}-{i}"), uid=f"{name}-m{i}")))
            status, headers, body = reader.response()
            assert status == 200 and headers["content-type"] == "application/json" and "date" in headers
            assert _uid(body) == f"{name}-m{i}"
        obj = _held(name)
        burst = [
            _post("/validate", review(obj, uid=f"{name}-v", dry_run=True)),
            _post("/mutate", review(_job(name), uid=f"{name}-m3")),
            b"GET /healthz HTTP/1.1\r\nHost: webhook\r\n\r\n",
            _post("/validate", review(obj, uid=f"{name}-v2")),
            _post("/mutate", review(_job(name), uid=f"{name}-m4")),
        ]
        tls.sendall(b"".join(burst))
        answers = [reader.response() for _ in burst]
    assert [status for status, _, _ in answers] == [200] * 5
    assert [_uid(answers[i][2]) for i in (0, 1, 3, 4)] == [f"{name}-v", f"{name}-m3", f"{name}-v2", f"{name}-m4"]
    assert answers[2][2] == b"ok\n"


def test_a_chunked_body_is_read_and_one_past_the_limit_gets_413(webhook: Webhook) -> None:
    body = review(_job("chunked"), uid="chunked-1")
    with _tls(webhook) as tls:
        reader = _Reader(tls)
        tls.sendall(_chunked("/mutate", body, size=97))
        status, _, answer = reader.response()
        assert status == 200 and _uid(answer) == "chunked-1"
        # The fixture's --max-body-bytes is 1 MiB: a chunked body that goes past it is refused
        # once it does, and the connection closed (the rest of the body is never read).
        big = b"x" * (300 << 10)
        tls.sendall(b"POST /validate HTTP/1.1\r\nHost: webhook\r\nTransfer-Encoding: chunked\r\n\r\n")
        status = 0
        try:
            for _ in range(5):
                tls.sendall(b"%x\r\n%s\r\n" % (len(big), big))
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass  # refused while still sending
        status, headers, answer = reader.response()
        assert status == 413 and headers.get("connection") == "close"
        assert "chunked body that went past it" in json.loads(answer)["error"]


def test_expect_100_continue_is_answered_before_the_body(webhook: Webhook) -> None:
    body = review(_job("expect"), uid="expect-1")
    with _tls(webhook) as tls:
        reader = _Reader(tls)
        head = _post("/mutate", body, "Expect: 100-continue")[: -len(body)]
        tls.sendall(head)
        status, _, _ = reader.response()
        assert status == 100
        tls.sendall(body)
        status, _, answer = reader.response()
        assert status == 200 and _uid(answer) == "expect-1"


def test_answers_from_the_head_skip_the_body_and_keep_the_connection(webhook: Webhook) -> None:
    """413 closes (the body is never read); an unknown path or a wrong method answers from the head
    and the body is skipped unread, so the next request on the connection is read as one."""
    with _tls(webhook) as tls:
        reader = _Reader(tls)
        tls.sendall(_post("/nowhere", b"{" * 5000))
        status, _, answer = reader.response()
        assert status == 404 and "/validate" in json.loads(answer)["error"]
        tls.sendall(b"GET /mutate HTTP/1.1\r\nHost: webhook\r\n\r\n")
        status, headers, _ = reader.response()
        assert status == 405 and headers["allow"] == "POST"
        tls.sendall(_post("/mutate", review(_job("after"), uid="after-1")))
        status, _, answer = reader.response()
        assert status == 200 and _uid(answer) == "after-1"
        tls.sendall(b"POST /validate HTTP/1.1\r\nHost: webhook\r\nContent-Length: 5000000\r\n\r\n")
        status, headers, answer = reader.response()
        assert status == 413 and headers.get("connection") == "close" and "5000000 bytes" in answer.decode()


@pytest.mark.parametrize(
    ("request_bytes", "status", "fragment"),
    [
        (b"POST /mutate HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}", 400, "can't be present with"),
        (b"POST /mutate HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n{}", 400, "can't be present with"),
        (b"POST /mutate HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", 400, "Content-Length"),
        (b"POST /mutate HTTP/1.1\r\nContent-Length: -2\r\n\r\n{}", 400, "Content-Length"),
        (b"POST /mutate HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "only chunked"),
        (b"POST /mutate HTTP/1.1\r\nBad Header: x\r\n\r\n", 400, "malformed request head"),
        (b"POST /mutate HTTP/1.1\r\n folded: x\r\n\r\n", 400, "malformed request head"),
        (b"POST /mutate\r\n\r\n", 400, "request line"),
        (b"POST /mutate HTTP/2.0\r\n\r\n", 400, "request line"),
        (b"POST /mutate HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, "chunk size"),
        (b"GET /healthz HTTP/1.1\r\nX: " + b"a" * (70 << 10) + b"\r\n\r\n", 431, "over"),
        (b"GET /healthz HTTP/1.1\r\n" + b"X: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n" * 2000 + b"\r\n", 431, "over"),
        (b"GET /healthz HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n", 400, "upgrade"),
        (b"CONNECT webhook:443 HTTP/1.1\r\n\r\n", 400, "upgrade"),
        (b"BREW /healthz HTTP/1.1\r\n\r\n", 400, "malformed request head"),
    ],
    ids=["cl-and-te", "te-and-cl", "two-lengths", "negative-length", "gzip", "space-in-name", "folded", "no-version", "http2", "bad-chunk", "huge-head", "many-fields", "upgrade", "connect", "unknown-method"],
)
def test_malformed_requests_get_a_status_and_a_reason_and_the_connection_closes(
    webhook: Webhook, request_bytes: bytes, status: int, fragment: str
) -> None:
    with _tls(webhook) as tls:
        reader = _Reader(tls)
        tls.sendall(request_bytes)
        got, headers, body = reader.response()
        assert got == status and fragment in json.loads(body)["error"], body
        assert headers.get("connection") == "close" and reader.closed()


def test_http10_and_connection_close_are_honoured(webhook: Webhook) -> None:
    with _tls(webhook) as tls:
        reader = _Reader(tls)
        tls.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        status, headers, body = reader.response()
        assert (status, body, headers.get("connection")) == (200, b"ok\n", "close") and reader.closed()
    with _tls(webhook) as tls:
        reader = _Reader(tls)
        tls.sendall(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        status, headers, _ = reader.response()
        assert status == 200 and headers.get("connection") == "keep-alive"
        tls.sendall(b"GET /readyz HTTP/1.1\r\nConnection: close\r\n\r\n")
        status, headers, body = reader.response()
        assert (status, body, headers.get("connection")) == (200, b"ok\n", "close") and reader.closed()


def test_a_malformed_request_behind_a_pending_answer_is_refused_after_it(webhook: Webhook) -> None:
    """Pipelined: a /validate waiting on its inbox ack, then bytes that are not a request. The
    review is answered first, then the 400, then the connection closes."""
    name = f"pl-{uuid.uuid4().hex[:6]}"
    obj = _held(name)
    with _tls(webhook) as tls:
        reader = _Reader(tls)
        tls.sendall(_post("/validate", review(obj, uid=f"{name}-v")) + b"POST /mutate HTTP/1.1\r\nBad Header: x\r\n\r\n")
        status, _, answer = reader.response()
        assert status == 200 and _uid(answer) == f"{name}-v" and json.loads(answer)["response"]["allowed"] is True
        status, headers, answer = reader.response()
        assert status == 400 and "malformed request head" in json.loads(answer)["error"]
        assert headers.get("connection") == "close" and reader.closed()


def test_a_body_sent_in_pieces_is_read_whole(webhook: Webhook) -> None:
    """The head, then the body a few bytes at a time, then a request whose head comes in pieces."""
    body = review(_job("pieces"), uid="pieces-1")
    data = _post("/mutate", body) + b"GET /hea"
    with _tls(webhook) as tls:
        reader = _Reader(tls)
        for i in range(0, len(data), 997):
            tls.sendall(data[i : i + 997])
        status, _, answer = reader.response()
        assert status == 200 and _uid(answer) == "pieces-1"
        tls.sendall(b"lthz HTTP/1.1\r\nHo")
        tls.sendall(b"st: webhook\r\n\r\n")
        assert reader.response()[::2] == (200, b"ok\n")



class _Transport(asyncio.Transport):
    """What a ``Connection`` writes, and whether it asked to pause reading or to close."""

    def __init__(self) -> None:
        super().__init__()
        self.out = bytearray()
        self.paused = False
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.out += data

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


class _Later:
    """An exchange answered when the test says so (as a /validate is, once its ack is in)."""

    def __init__(self, waiting: list[Respond]) -> None:
        self.waiting = waiting

    def received(self, body: bytes, respond: Respond) -> Reply | None:
        self.waiting.append(respond)
        return None

    def abandoned(self, why: str) -> Reply | None:
        return None


class _Handler:
    max_body = 1 << 20
    read_timeout_s = 10.0

    def __init__(self) -> None:
        self.waiting: list[Respond] = []

    def begin(self, method: bytes, path: bytes, declared: int | None) -> Reply | Exchange:
        if path == b"/big":
            return error(413, "too large", close=True)
        return _Later(self.waiting) if path == b"/slow" else error(404, path.decode())


async def test_reading_pauses_while_over_a_mib_waits_behind_a_pending_answer() -> None:
    """The connection in process: a request whose answer is pending, then 3 MiB of pipelined
    requests, fed as a transport reads them (256 KiB at a time). Reading pauses once over 1 MiB is
    queued; the answer written, the queue is served in order and reading resumes."""
    handler = _Handler()
    connection = Connection(handler, set(), keepalive_s=30)
    transport = _Transport()
    connection.connection_made(transport)
    data = _post("/slow", b"{}") + b"".join(_post(f"/n{i}", b"x" * (600 << 10)) for i in range(5))
    for i in range(0, len(data), 256 << 10):
        connection.data_received(data[i : i + (256 << 10)])
    assert transport.paused and not transport.out and len(handler.waiting) == 1
    handler.waiting[0](Reply(200, b"{}"))
    assert not transport.paused and not transport.closed
    out = bytes(transport.out)
    assert re.findall(rb"HTTP/1\.1 (\d+) ", out) == [b"200"] + [b"404"] * 5
    assert [json.loads(part.partition(b"\r\n\r\n")[2])["error"] for part in out.split(b"HTTP/1.1 404")[1:]] == [f"/n{i}" for i in range(5)]
    connection.connection_lost(None)


async def test_a_refused_body_is_read_to_its_end_before_the_connection_closes() -> None:
    """413 from the head: the answer goes at once, the connection closes only once the parser has
    seen the end of the body the client is still sending (it reads the answer, not a reset)."""
    connection = Connection(_Handler(), set(), keepalive_s=30)
    transport = _Transport()
    connection.connection_made(transport)
    data = _post("/big", b"x" * 300_000) + _post("/n0", b"{}")
    connection.data_received(data[:100_000])
    assert bytes(transport.out).startswith(b"HTTP/1.1 413 ") and b"Connection: close" in transport.out
    assert not transport.closed
    connection.data_received(data[100_000:])
    assert transport.closed and transport.out.count(b"HTTP/1.1 ") == 1  # the request after it is not served
    connection.connection_lost(None)
