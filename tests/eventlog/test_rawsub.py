"""Raw subscriptions and the fast protocol parser: the same messages as nats-py's path, in
order, whatever way the bytes are cut into reads."""

from __future__ import annotations

import nats
import pytest
from nats.errors import ProtocolError

from eventlog.jetstream import connect
from eventlog.jetstream.connection import KdClient
from eventlog.jetstream.rawsub import FastParser, Raw, RawSubscription, headers_of
from tests.waiting import Unmet, eventually

STREAM = (
    b"MSG a.b 7 5\r\nhello\r\n"
    b"+OK\r\n"
    b"MSG a.c 7 reply.to 0\r\n\r\n"
    b"HMSG _INBOX.x 7 $JS.ACK.S.C.1.42.3.0.0 24 27\r\nNATS/1.0\r\nK: v\r\nL: w\r\n\r\nabc\r\n"
    b"HMSG _INBOX.x 7 58 58\r\nNATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 5\r\n\r\n\r\n"
    b"PONG\r\n"
    b"MSG a.d 9 3\r\nxyz\r\n"
)
EXPECTED_RAW: list[Raw] = [
    (b"a.b", b"", b"hello", None),
    (b"a.c", b"reply.to", b"", None),
    (b"_INBOX.x", b"$JS.ACK.S.C.1.42.3.0.0", b"abc", b"NATS/1.0\r\nK: v\r\nL: w\r\n\r\n"),
    (b"_INBOX.x", b"", b"", b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 5\r\n\r\n"),
]


async def test_parser_gives_the_same_messages_however_the_bytes_are_cut() -> None:
    for size in range(1, len(STREAM) + 1):
        nc = KdClient()
        got: list[Raw] = []
        nc.raw_sinks[7] = lambda s, r, d, h, got=got: got.append((s, r, d, h))
        other: list[tuple[int, bytes, bytes]] = []

        async def elsewhere(sid: int, subject: bytes, reply: bytes, data: bytes, hdr: bytes | None) -> None:
            other.append((sid, subject, data))  # noqa: B023 - consumed within the iteration

        nc._process_msg = elsewhere  # type: ignore[method-assign]
        parser = nc._ps
        assert isinstance(parser, FastParser)
        for i in range(0, len(STREAM), size):
            await parser.parse(STREAM[i : i + size])
        assert got == EXPECTED_RAW, size
        assert other == [(9, b"a.d", b"xyz")], size  # not raw: nats-py's path
        assert not parser.buf
        assert nc.stats["in_msgs"] == 4


async def test_a_malformed_message_line_is_a_protocol_error() -> None:
    parser = KdClient()._ps
    with pytest.raises(ProtocolError):  # nats-py reconnects on it; anything else stops its read loop
        await parser.parse(b"MSG a.b seven 5\r\nhello\r\n")


def test_status_headers_read_as_nats_py_reports_them() -> None:
    assert headers_of(EXPECTED_RAW[3][3]) == {
        "Status": "408",
        "Description": "Request Timeout",
        "Nats-Pending-Messages": "5",
    }
    assert headers_of(b"NATS/1.0 503\r\n\r\n") == {"Status": "503"}
    assert headers_of(EXPECTED_RAW[2][3]) == {"K": "v", "L": "w"}
    assert headers_of(None) == {}


async def _exchange(nc: nats.aio.client.Client) -> list[Raw]:
    raw = await RawSubscription(nc, "raw.test").open()
    try:
        big = bytes(range(256)) * 1024  # larger than one read: a payload cut across reads
        await nc.publish("raw.test", b"one")
        await nc.publish("raw.test", big, headers={"K": "v"})
        await nc.publish("raw.test", b"three", reply="back")
        # An ordinary subscription and a request on the same connection still work.
        plain = await nc.subscribe("plain.test")
        await nc.publish("plain.test", b"p", headers={"H": "1"})
        msg = await plain.next_msg(timeout=5)
        assert (msg.data, msg.headers) == (b"p", {"H": "1"})
        await eventually(lambda: len(raw.items) >= 3 or Unmet(len(raw.items)), what="three raw messages")
        got = list(raw.items)
        assert [(s, r, d) for s, r, d, _ in got] == [
            (b"raw.test", b"", b"one"),
            (b"raw.test", b"", big),
            (b"raw.test", b"back", b"three"),
        ]
        assert headers_of(got[1][3]) == {"K": "v"}
        return got
    finally:
        await raw.close()


async def test_raw_subscription_on_our_client(nats_url: str, log_root: str) -> None:
    jlog = await connect(nats_url, root=log_root)
    try:
        assert isinstance(jlog.nc, KdClient)
        await _exchange(jlog.nc)
        assert not jlog.nc.raw_sinks  # closed: nothing left registered
    finally:
        await jlog.close()


async def test_raw_subscription_on_a_plain_client(nats_url: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        await _exchange(nc)
    finally:
        await nc.close()
