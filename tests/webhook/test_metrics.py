"""The lock-free latency histogram renders as a Prometheus histogram: cumulative buckets, an
observation on a bound counted in that bound's bucket (``le``), sum and count per endpoint."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from webhook.metrics import Metrics


def _samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_latency_histogram_is_cumulative_per_endpoint() -> None:
    metrics = Metrics()
    validate = metrics.latency.labels("validate")
    for seconds in (0.0001, 0.0005, 0.003, 20.0):
        validate.observe(seconds)
    metrics.latency.labels("mutate").observe(0.2)
    got = _samples(metrics)

    def bucket(endpoint: str, le: str) -> float:
        return got[("kdispatch_webhook_request_seconds_bucket", (("endpoint", endpoint), ("le", le)))]

    assert bucket("validate", "0.0005") == 2  # 0.0005 itself falls in le="0.0005"
    assert bucket("validate", "0.002") == 2
    assert bucket("validate", "0.005") == 3
    assert bucket("validate", "10.0") == 3
    assert bucket("validate", "+Inf") == 4
    assert got[("kdispatch_webhook_request_seconds_count", (("endpoint", "validate"),))] == 4
    assert abs(got[("kdispatch_webhook_request_seconds_sum", (("endpoint", "validate"),))] - 20.0036) < 1e-9
    assert bucket("mutate", "0.1") == 0 and bucket("mutate", "0.25") == 1


def test_loop_counters_render_as_prometheus_counters() -> None:
    metrics = Metrics()
    metrics.requests.labels("validate", "allowed").inc()
    metrics.requests.labels("validate", "allowed").inc()
    metrics.requests.labels("mutate", "denied").inc()
    metrics.published.labels("JobSubmitted").inc()
    got = _samples(metrics)
    assert got[("kdispatch_webhook_requests_total", (("endpoint", "validate"), ("result", "allowed")))] == 2
    assert got[("kdispatch_webhook_requests_total", (("endpoint", "mutate"), ("result", "denied")))] == 1
    assert got[("kdispatch_webhook_published_total", (("type", "JobSubmitted"),))] == 1
