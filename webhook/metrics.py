"""Prometheus metrics of one webhook server (own registry, so several servers can share a process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

# Admission webhooks answer in milliseconds; the apiserver gives up at timeoutSeconds (10 s max).
_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "kdispatch_webhook_requests",
            "Admission requests answered, by endpoint and result (allowed, denied, bad_request).",
            ["endpoint", "result"],
            registry=self.registry,
        )
        self.denials = Counter(
            "kdispatch_webhook_denials",
            "Admission requests denied, by endpoint and reason.",
            ["endpoint", "reason"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "kdispatch_webhook_request_seconds",
            "Time to answer an admission request, publishing included.",
            ["endpoint"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.published = Counter(
            "kdispatch_webhook_published", "Events acknowledged by the inbox, by type.", ["type"], registry=self.registry
        )
        self.publish_failures = Counter(
            "kdispatch_webhook_publish_failures",
            "Events not acknowledged in time (the job stays held; the manager watcher backfills it).",
            ["reason"],
            registry=self.registry,
        )

        self.in_flight = Gauge(
            "kdispatch_webhook_in_flight", "Reviews being answered right now.", registry=self.registry
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
