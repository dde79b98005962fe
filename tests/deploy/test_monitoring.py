"""deploy/overlays/monitoring and deploy/monitoring/grafana-dashboard.json point at what exists:
the Services and ports the ServiceMonitors select, and the metric names every alert, dashboard
panel and documented query uses are ones the processes' ``/metrics`` expose. docs/operations.md
lists every metric and every shipped alert."""

from __future__ import annotations

import copy
import functools
import json
import re
from typing import Any

import jsonschema
import pytest

from reconciler.service.clusters.metrics import ClusterMetrics
from reconciler.service.metrics import ReconcilerMetrics
from tests.deploy import promoperator
from tests.deploy.conftest import DEPLOY, OVERLAYS, REPO, find, one, rendered
from webhook.metrics import Metrics as WebhookMetrics

MONITORING = "overlays/monitoring"
DASHBOARD = DEPLOY / "monitoring" / "grafana-dashboard.json"
DOC = (REPO / "docs" / "operations.md").read_text()
_METRIC = re.compile(r"\bkdispatch_[a-z0-9_]+")


@functools.cache
def families() -> dict[str, str]:
    """Every metric family the reconciler (with the actuator's) and the webhook expose: name -> type.
    Families are declared even without samples (labelled counters before their first increment,
    the fleet gauges on a standby), so the names are all there on a fresh process."""
    reconciler = ReconcilerMetrics()
    ClusterMetrics(reconciler.registry)  # the actuator's, on the same /metrics (service.wiring)
    out: dict[str, str] = {}
    for text in (reconciler.render(), WebhookMetrics().render()):
        for line in text.decode().splitlines():
            if line.startswith("# TYPE "):
                _, _, name, kind = line.split(" ")
                if not name.endswith("_created"):  # prometheus_client's creation timestamps
                    out[name] = kind
    return out


def series_names() -> set[str]:
    """Names a PromQL query can use: histograms as their _bucket/_count/_sum series."""
    out = set()
    for name, kind in families().items():
        out |= {f"{name}_bucket", f"{name}_count", f"{name}_sum"} if kind == "histogram" else {name}
    return out


def dashboard_exprs() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def alert_rules() -> list[dict[str, Any]]:
    (rule,) = find(rendered(MONITORING), "PrometheusRule")
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def _unknown(exprs: list[str]) -> dict[str, list[str]]:
    known = series_names()
    return {e: sorted(set(_METRIC.findall(e)) - known) for e in exprs if set(_METRIC.findall(e)) - known}


def test_the_checks_can_fail() -> None:
    assert _unknown(["rate(kdispatch_sequencing_lag_ms[5m])"]) == {
        "rate(kdispatch_sequencing_lag_ms[5m])": ["kdispatch_sequencing_lag_ms"]
    }
    assert "kdispatch_batch_seconds_bucket" in series_names() and "kdispatch_batch_seconds" not in series_names()


def test_metric_names_are_in_base_units() -> None:
    assert not [n for n in families() if re.search(r"_(ms|millis|milliseconds|kb|mb|gb|kib|mib|minutes)(_|$)", n)]
    assert "kdispatch_sequencing_lag_seconds" in families()


def test_dashboard_panels_use_exposed_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = dashboard_exprs()
    assert len(exprs) >= 20
    assert _unknown(exprs) == {}
    variables = [v["definition"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    assert variables and _unknown(variables) == {}
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    # The series of each area are on the dashboard.
    used = {m for e in exprs for m in _METRIC.findall(e)}
    for name in (
        "kdispatch_queue_pending_jobs",
        "kdispatch_job_wait_seconds_bucket",
        "kdispatch_cluster_health",
        "kdispatch_decisions_total",
        "kdispatch_webhook_requests_total",
        "kdispatch_events_emitted_total",
    ):
        assert name in used, name


def test_alerts_use_exposed_metrics_and_are_documented() -> None:
    rules = alert_rules()
    assert _unknown([r["expr"] for r in rules]) == {}
    for rule in rules:
        assert rule["alert"] in DOC, f"{rule['alert']} is explained in docs/operations.md"
        assert rule["expr"] in DOC, f"the expression of {rule['alert']} is in docs/operations.md as shipped"
        assert rule["expr"].count("(") == rule["expr"].count(")"), rule["alert"]
    alerts = {r["alert"] for r in rules}
    for wanted in (
        "KdispatchLeaderMissing",
        "KdispatchSequencingLag",
        "KdispatchPendingGrowing",
        "KdispatchWaitP95High",
        "KdispatchClusterLost",
        "KdispatchWebhookPublishFailures",
    ):
        assert wanted in alerts


def test_every_metric_is_documented_and_every_documented_metric_exists() -> None:
    table = {m.group(1) for m in re.finditer(r"^\| `(kdispatch_[a-z0-9_]+)`", DOC, re.M)}
    assert table == set(families()), (sorted(set(families()) - table), sorted(table - set(families())))
    # The queries on the page (alerts, examples) name series that exist.
    queries = re.findall(r"```promql\n(.*?)```", DOC, re.S)
    assert len(queries) >= 10
    assert _unknown(queries) == {}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_service_monitors_select_one_service_and_its_port(overlay: str) -> None:
    services = find(rendered(overlay), "Service")
    for monitor in find(rendered(MONITORING), "ServiceMonitor"):
        spec = monitor["spec"]
        wanted = spec["selector"]["matchLabels"]
        matched = [
            s
            for s in services
            if s["metadata"]["namespace"] in spec["namespaceSelector"]["matchNames"]
            and wanted.items() <= s["metadata"].get("labels", {}).items()
        ]
        assert len(matched) == 1, (monitor["metadata"]["name"], [s["metadata"]["name"] for s in matched])
        ports = {p.get("name") for p in matched[0]["spec"]["ports"]}
        assert {e["port"] for e in spec["endpoints"]} <= ports


def test_webhook_scrape_trusts_the_certificate_it_is_served_with() -> None:
    monitor = one(rendered(MONITORING), "ServiceMonitor", "kdispatch-webhook")
    (endpoint,) = monitor["spec"]["endpoints"]
    certificate = one(rendered("overlays/cert-manager"), "Certificate", "kdispatch-webhook")
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["serverName"] in certificate["spec"]["dnsNames"]
    assert endpoint["tlsConfig"]["ca"]["secret"]["name"] == certificate["spec"]["secretName"]


def test_structural_check_catches_a_misspelt_field() -> None:
    monitor = copy.deepcopy(one(rendered(MONITORING), "ServiceMonitor", "kdispatch-reconciler"))
    promoperator.validate(monitor)
    monitor["spec"]["endpoints"][0]["scrapeInterval"] = monitor["spec"]["endpoints"][0].pop("interval")
    with pytest.raises(jsonschema.ValidationError, match="scrapeInterval"):
        promoperator.validate(monitor)
    (rule,) = copy.deepcopy(find(rendered(MONITORING), "PrometheusRule"))
    rule["spec"]["groups"][0]["rules"][0]["for"] = "2 minutes"
    with pytest.raises(jsonschema.ValidationError):
        promoperator.validate(rule)
