"""How much work the webhook takes on at once, so an overload is shed fast instead of piling up
in memory (issue 18: at 2,000 reviews/s an unbounded server grew from 61 MB to ~700 MB).

Three bounds, sized for the deploy manifest's 512 MiB limit (docs/webhook.md, "Load limits"):
- reviews in flight (``max_in_flight``) and their bodies' bytes (``max_bytes_in_flight``): one
  more is answered at once with 429 and ``Retry-After``, before its body is read
  (``webhook.server``);
- open connections (``max_connections``): one more is closed as soon as it is accepted, before
  anything is allocated for it (``webhook.http1.Listener``); a TLS handshake that does not finish
  within ``HANDSHAKE_TIMEOUT_S`` is dropped.
"""

from __future__ import annotations

DEFAULT_MAX_IN_FLIGHT = 256
DEFAULT_MAX_BYTES_IN_FLIGHT = 32 * 1024 * 1024
DEFAULT_MAX_CONNECTIONS = 512  # each TLS connection holds ~0.4 MiB (asyncio's 256 KiB buffer, OpenSSL)
HANDSHAKE_TIMEOUT_S = 10.0  # the apiserver's default timeoutSeconds: it has given up by then
KEEPALIVE_TIMEOUT_S = 30.0  # an idle connection's buffers are released after this
RETRY_AFTER_S = 1

# Sizing (measured: tests/webhook/test_faults.py, docs/webhook.md "Load limits").
AT_REST_MIB = 60.0  # the process after start-up, NATS connected
PER_CONNECTION_MIB = 0.4  # asyncio's 256 KiB TLS read buffer, OpenSSL's state, the request buffer
BODY_EXPANSION = 4  # a review in flight: its body, the decoded JSON, the recorded manifest


def memory_ceiling_mib(*, max_connections: int, max_bytes_in_flight: int) -> float:
    """What the webhook may hold at its limits; the container's memory limit must be above it."""
    return AT_REST_MIB + max_connections * PER_CONNECTION_MIB + BODY_EXPANSION * max_bytes_in_flight / 2**20
