"""What a fault probe found (issue 18), each reproduced over the real server first."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import ssl
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from eventlog.embedded import EmbeddedNats
from eventlog.kube import names
from tests.stalling import stall
from tests.webhook.conftest import Webhook, review, start_webhook
from webhook import admit, jsonpatch
from webhook.review import ReviewError, decode_review

_JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "NAME", "namespace": "team-a"},
    "spec": {"template": {"spec": {"containers": [{"name": "m", "image": "IMAGE"}]}}},
}
_GOOD = review(_JOB, uid="utf8", dry_run=True)


@pytest.mark.parametrize(
    ("body", "offset"),
    [
        (_GOOD.replace(b'"NAME"', b'"a\xff\xfeb"'), _GOOD.index(b'"NAME"') + 2),  # in a field read as str
        (_GOOD.replace(b'"IMAGE"', b'"\xc3"'), _GOOD.index(b'"IMAGE"') + 1),  # in the raw object, cut short
        (_GOOD.replace(b"admission.k8s.io/v1", b"adm\xff"), _GOOD.index(b"admission.k8s.io/v1") + 3),
    ],
    ids=["name", "object", "apiVersion"],
)
def test_invalid_utf8_inside_a_string_is_a_review_error_with_the_byte(body: bytes, offset: int) -> None:
    with pytest.raises(ReviewError, match=f"invalid UTF-8 at byte {offset}"):
        decode_review(body)


@pytest.mark.parametrize("path", ["/mutate", "/validate"])
def test_invalid_utf8_over_http_gets_400_with_the_reason(webhook: Webhook, path: str) -> None:
    body = _GOOD.replace(b'"NAME"', b'"a\xff\xfeb"')
    status, text = webhook.request("POST", path, body=body)
    assert status == 400, text
    assert "invalid UTF-8 at byte" in json.loads(text)["error"]


def _rss_kib(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (the peak since start) of a process, in KiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {key: int(fields[key].split()[0]) for key in ("VmRSS", "VmHWM")}


def _big_job(name: str) -> dict[str, Any]:
    """An opted-in Job whose review is ~128 KiB: what each review in flight holds is then
    large enough that an unbounded server's growth is far beyond the bound asserted."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": {names.QUEUE_LABEL: "user-queue"},
            "annotations": {f"example.com/note-{i}": "x" * 1000 for i in range(128)},
        },
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "x"}]}}},
    }


def _held(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the apiserver sends it to /validate: after /mutate's patch (held, placed)."""
    _, request = decode_review(review(obj, uid="m"))
    outcome = admit.mutate(request, admit.Settings())
    assert outcome.allowed and outcome.response.patch is not None, outcome.response
    patched = jsonpatch.apply(obj, json.loads(base64.b64decode(outcome.response.patch)))
    patched["metadata"]["uid"] = "obj-burst"
    return patched


BURST = 2000
CONCURRENCY = 200
MAX_IN_FLIGHT = 16
MAX_CONNECTIONS = 64
# Measured on this burst: bounded, the peak grew by ~100 MiB (16 reviews of ~128 KiB held, 64
# connections, and the TLS buffers, 256 KiB each, of the connections refused after their
# handshake); unbounded (both limits 100,000), by ~640 MiB (61 -> 700 MiB), as in the probe.
GROWTH_BOUND_MIB = 160


async def test_an_overload_burst_is_shed_fast_and_memory_stays_flat(tmp_path: Path) -> None:
    server = EmbeddedNats(data_dir=tmp_path / "nats")
    await server.start_async()
    hook = start_webhook(
        nats_url=server.url,
        root="whburst",
        data_dir=tmp_path,
        extra=["--publish-timeout", "3", "--max-in-flight", str(MAX_IN_FLIGHT), "--max-connections", str(MAX_CONNECTIONS)],
    )
    assert server.pid is not None
    try:
        body = review(_held(_big_job("burst")), uid="burst")
        # Reviews that reach the inbox wait on its ack for the whole bound: with NATS stopped,
        # every admitted review stays in flight and the burst is far above what the server takes.
        await stall(server)
        before = _rss_kib(hook.proc.pid)
        statuses: list[int] = []
        reasons: set[str] = set()
        retry_after: set[str | None] = set()
        gate = asyncio.Semaphore(CONCURRENCY)
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(
            timeout=timeout, connector=aiohttp.TCPConnector(limit=CONCURRENCY, ssl=hook.ssl_context())
        ) as session:

            async def one(i: int) -> None:
                async with gate:
                    try:
                        await answer(i)
                    except (aiohttp.ClientConnectionError, ssl.SSLError):
                        statuses.append(0)  # closed on accept: beyond --max-connections

            async def answer(i: int) -> None:
                async with session.post(hook.url + "/validate", data=body.replace(b'"burst"', f'"b{i}"'.encode(), 1)) as response:
                    statuses.append(response.status)
                    if response.status == 429:
                        reasons.add((await response.json())["error"].split(":")[0])
                        retry_after.add(response.headers.get("Retry-After"))
                    else:
                        await response.read()

            await asyncio.gather(*(one(i) for i in range(BURST)))
        after = _rss_kib(hook.proc.pid)
    finally:
        os.kill(server.pid, signal.SIGCONT)
    try:
        counts = Counter(statuses)
        print(f"webhook RSS {before['VmRSS'] // 1024} MiB before, peak {after['VmHWM'] // 1024} MiB, {counts}")
        assert set(counts) <= {0, 200, 429}, counts
        assert counts[429] + counts[0] >= BURST // 2, counts  # most of the burst was above the bounds
        assert counts[429] >= MAX_IN_FLIGHT, counts
        assert counts[200] >= MAX_IN_FLIGHT, counts  # and the bound was used
        assert reasons == {"overloaded"} and retry_after == {"1"}
        growth_mib = (after["VmHWM"] - before["VmRSS"]) / 1024
        assert growth_mib < GROWTH_BOUND_MIB, f"RSS grew by {growth_mib:.0f} MiB under the burst ({before} -> {after})"
        text = hook.request("GET", "/metrics")[1].decode()
        assert f'kdispatch_webhook_requests_total{{endpoint="validate",result="shed"}} {float(counts[429])}' in text
    finally:
        assert hook.stop() == 0, hook.log.read_text()[-3000:]
        await server.stop_async()


OVERSIZED_BURSTS = 5
# Measured on these bursts: before the fix, +80 MiB over 4 bursts (+265 MiB when each request
# had its own connection): bodies read only to be refused, and each idle keep-alive connection
# holding its last body. After it, +4-7 MiB (allocator fragmentation). The soak saw the same
# (188 -> 208 -> 270 MB over 10 minutes).
REPEAT_GROWTH_BOUND_MIB = 20


async def test_repeated_oversized_bodies_are_refused_unread_and_memory_stays_flat(tmp_path: Path) -> None:
    """An 8 MiB body is refused with 413 from its Content-Length, before it is read, on a closed
    connection; bursts of them, again and again, leave the webhook's RSS where the first left it."""
    server = EmbeddedNats(data_dir=tmp_path / "nats")
    await server.start_async()
    hook = start_webhook(nats_url=server.url, root="whbig", data_dir=tmp_path)
    oversized = b"x" * (8 << 20)
    # The largest body still read: just under the limit (6 MiB), and not a review.
    under = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","x":"' + b"y" * (6 * 2**20 - 200) + b'"}'
    tls = hook.ssl_context()  # one context: the pool keeps and reuses connections, as an apiserver does
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:

            async def post(body: bytes) -> tuple[int, str]:
                try:
                    async with session.post(hook.url + "/validate", data=body, ssl=tls) as response:
                        return response.status, (await response.read()).decode()
                except (aiohttp.ClientConnectionError, ssl.SSLError):
                    return 0, ""  # closed before the client finished sending: still refused unread

            async def burst() -> Counter[int]:
                answers = await asyncio.gather(*(post(oversized if i % 2 else under) for i in range(40)))
                for status, text in answers:
                    if status == 413:
                        assert "8388608 bytes" in text and "6291456" in text, text  # what came, what is taken
                return Counter(status for status, _ in answers)

            first = await burst()
            settled = _rss_kib(hook.proc.pid)["VmRSS"]
            counts = [await burst() for _ in range(OVERSIZED_BURSTS - 1)]
            after = _rss_kib(hook.proc.pid)["VmRSS"]
        print(f"webhook RSS after burst 1: {settled // 1024} MiB, after burst {OVERSIZED_BURSTS}: {after // 1024} MiB; {first} {counts}")
        for count in [first, *counts]:
            assert set(count) <= {0, 400, 413, 429}, count
            assert count[413] + count[0] >= 1 and count[400] >= 1, count
        growth = (after - settled) / 1024
        assert growth < REPEAT_GROWTH_BOUND_MIB, f"RSS grew by {growth:.0f} MiB over {OVERSIZED_BURSTS - 1} more bursts"
    finally:
        assert hook.stop() == 0, hook.log.read_text()[-3000:]
        await server.stop_async()
