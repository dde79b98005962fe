"""Prometheus metrics of one webhook server (own registry, so several servers can share a process)."""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

# Admission webhooks answer in milliseconds; the apiserver gives up at timeoutSeconds (10 s max).
_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = LoopCounter(
            "kdispatch_webhook_requests",
            "Admission requests answered, by endpoint and result (allowed, denied, bad_request).",
            labels=("endpoint", "result"),
        )
        self.registry.register(self.requests)
        self.denials = Counter(
            "kdispatch_webhook_denials",
            "Admission requests denied, by endpoint and reason.",
            ["endpoint", "reason"],
            registry=self.registry,
        )
        self.latency = LoopHistogram(
            "kdispatch_webhook_request_seconds",
            "Time to answer an admission request, publishing included.",
            label="endpoint",
            buckets=_BUCKETS,
        )
        self.registry.register(self.latency)
        self.published = LoopCounter(
            "kdispatch_webhook_published", "Events acknowledged by the inbox, by type.", labels=("type",)
        )
        self.registry.register(self.published)
        self.publish_failures = Counter(
            "kdispatch_webhook_publish_failures",
            "Events not acknowledged in time (the job stays held; the manager watcher backfills it).",
            ["reason"],
            registry=self.registry,
        )
        self.connections_refused = Counter(
            "kdispatch_webhook_connections_refused",
            "Connections closed on accept because --max-connections were open.",
            registry=self.registry,
        )
        self.in_flight = Gauge(
            "kdispatch_webhook_in_flight", "Reviews being answered right now.", registry=self.registry
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


class LoopCounter(Collector):
    """A counter incremented from the event loop thread only (per review: no lock round trip)."""

    def __init__(self, name: str, documentation: str, *, labels: tuple[str, ...]) -> None:
        self.name = name
        self.documentation = documentation
        self.label_names = labels
        self._children: dict[tuple[str, ...], _Count] = {}

    def labels(self, *values: str) -> _Count:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = _Count()
        return child

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(self.name, self.documentation, labels=list(self.label_names))
        for values, child in self._children.items():
            family.add_metric(list(values), float(child.value))
        yield family


class _Count:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self, amount: int = 1) -> None:
        self.value += amount


class _Series:
    __slots__ = ("counts", "sum")

    def __init__(self, size: int) -> None:
        self.counts = [0] * size  # per bucket, not cumulative; the last is +Inf
        self.sum = 0.0


class LoopHistogram(Collector):
    """A histogram observed from the event loop thread only, so without prometheus_client's
    per-observation locks (two lock round trips per review, on the hot path of every review)."""

    def __init__(self, name: str, documentation: str, *, label: str, buckets: tuple[float, ...]) -> None:
        self.name = name
        self.documentation = documentation
        self.label = label
        self.bounds = buckets
        self._series: dict[str, _Series] = {}

    def labels(self, value: str) -> _Observer:
        series = self._series.get(value)
        if series is None:
            series = self._series[value] = _Series(len(self.bounds) + 1)
        return _Observer(series, self.bounds)

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=[self.label])
        for value, series in self._series.items():
            cumulative, total = [], 0
            for bound, count in zip((*self.bounds, float("inf")), series.counts, strict=True):
                total += count
                cumulative.append((_le(bound), float(total)))
            family.add_metric([value], cumulative, series.sum)
        yield family


class _Observer:
    __slots__ = ("_bounds", "_series")

    def __init__(self, series: _Series, bounds: tuple[float, ...]) -> None:
        self._series = series
        self._bounds = bounds

    def observe(self, seconds: float) -> None:
        self._series.counts[bisect.bisect_left(self._bounds, seconds)] += 1  # le: bound >= seconds
        self._series.sum += seconds


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)
