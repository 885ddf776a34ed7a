"""Alert policies and the dashboard: every signal issue 9 asks for, each alert linking its
runbook section, and a dashboard of the same figures that renders to valid JSON."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from provider_schema import load_schema
from tfconfig import MODULES, REPO, env_dirs, load, only_block

MONITORING = MODULES / "monitoring"
RUNBOOK = REPO / "docs" / "runbook.md"
WORKLOAD = "workload.googleapis.com"

# The OpenTelemetry metrics the services export (issue 9): name -> (kind, value type, labels).
METRICS = {
    "relayflow.flows.started": ("CUMULATIVE", "INT64", {"flow", "tenant"}),
    "relayflow.flows.ended": ("CUMULATIVE", "INT64", {"flow", "status", "code"}),
    "relayflow.step.duration": ("CUMULATIVE", "DISTRIBUTION", {"flow", "step", "kind", "outcome"}),
    "relayflow.flow.polls": ("CUMULATIVE", "DISTRIBUTION", {"flow"}),
    "relayflow.step.retries": ("CUMULATIVE", "INT64", {"flow"}),
    "relayflow.claim.conflicts": ("CUMULATIVE", "INT64", {"flow"}),
    "relayflow.sweeper.rescues": ("CUMULATIVE", "INT64", {"flow"}),
    "relayflow.sweeper.oldest_overdue_age": ("GAUGE", "DOUBLE", {"flow"}),
    "relayflow.messages.rejected": ("CUMULATIVE", "INT64", {"flow"}),
    # Issue 11: dependencies' breakers and tenants' waiting starts.
    "relayflow.breaker.state": ("GAUGE", "INT64", {"dependency"}),
    "relayflow.breaker.transitions": ("CUMULATIVE", "INT64", {"dependency", "to"}),
    "relayflow.dependency.deferred": ("CUMULATIVE", "INT64", {"dependency", "reason"}),
    "relayflow.dependency.calls": ("CUMULATIVE", "INT64", {"dependency", "outcome"}),
    "relayflow.tenant.waiting": ("GAUGE", "INT64", {"tenant"}),
    # Issue 18: clean-ups of failed flows, and those given up after the undo window.
    "relayflow.cleanups.ended": ("CUMULATIVE", "INT64", {"flow", "tenant", "state"}),
    "relayflow.cleanups.abandoned": ("CUMULATIVE", "INT64", {"flow", "tenant"}),
}
# Alert -> (what its filter must read, runbook section).
ALERTS = {
    "dead_letter_backlog": (
        [
            "pubsub.googleapis.com/subscription/num_undelivered_messages",
            "var.dead_letter_subscription",
        ],
        "dead-letter-backlog",
    ),
    "overdue_flows": (['metric_type["relayflow.sweeper.oldest_overdue_age"]'], "overdue-flows"),
    "sweeper_rescues": (['metric_type["relayflow.sweeper.rescues"]'], "sweeper-rescues"),
    "failed_flows": (
        ['metric_type["relayflow.flows.ended"]', '\\"FAILED\\"', '\\"TIMED_OUT\\"'],
        "failed-flows",
    ),
    "task_failures": (
        ["cloudtasks.googleapis.com/queue/task_attempt_count", "var.queues"],
        "task-failures",
    ),
    "breaker_open": (
        ['metric_type["relayflow.breaker.state"]', "metric.label.dependency"],
        "breaker-open",
    ),
    "cleanup_abandoned": (
        ['metric_type["relayflow.cleanups.abandoned"]', "metric.label.flow", "metric.label.tenant"],
        "cleanup-abandoned",
    ),
}


def _main() -> str:
    return (MONITORING / "main.tf").read_text(encoding="utf-8")


def _alert_block(name: str) -> str:
    """The HCL text of one alert's object in the alerts local."""
    text = _main()
    start = text.index(f"      {name} = {{")
    return text[start : text.index("\n      }\n", start)]


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    headings = re.findall(r"^#{1,6} (.+)$", markdown, re.M)
    return {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}


# --- Metrics ----------------------------------------------------------------------------------


def test_a_descriptor_is_seeded_for_each_relayflow_metric_then_left_to_the_exporter() -> None:
    metrics = load(MONITORING).locals["metrics"]
    assert set(metrics) == set(METRICS)
    for name, (kind, value_type, labels) in METRICS.items():
        assert metrics[name]["kind"] == kind, name
        assert metrics[name]["value_type"] == value_type, name
        assert labels <= set(metrics[name]["labels"]), name
    descriptor = load(MONITORING).resource("google_monitoring_metric_descriptor", "relayflow").body
    assert descriptor["type"] == "${local.workload}/${each.key}"
    assert load(MONITORING).locals["workload"] == WORKLOAD
    assert only_block(descriptor, "lifecycle")["ignore_changes"] == "all"


def test_alert_policies_wait_until_new_descriptors_can_be_alerted_on() -> None:
    policy = load(MONITORING).resource("google_monitoring_alert_policy", "main").body
    assert policy["depends_on"] == ["${terraform_data.metrics_visible}"]
    wait = load(MONITORING).resource("terraform_data", "metrics_visible").body
    assert "google_monitoring_metric_descriptor.relayflow" in wait["triggers_replace"]
    assert load(MONITORING).variables["metric_descriptor_wait_s"].body["default"] >= 600


# --- Alerts -------------------------------------------------------------------------------------


@pytest.mark.parametrize("alert", sorted(ALERTS))
def test_each_alert_reads_its_signal(alert: str) -> None:
    block = _alert_block(alert)
    needles, _ = ALERTS[alert]
    for needle in needles:
        assert needle in block, (alert, needle)
    assert re.search(r"threshold\s+=", block)


def test_every_service_has_its_own_5xx_ratio_alert() -> None:
    text = _main()
    assert 'for service in var.services : "http_5xx_${service}" => {' in text
    block = text[text.index("for service in var.services") :]
    assert 'metric.label.response_code_class = \\"5xx\\"' in block
    assert "run.googleapis.com/request_count" in block
    assert 'denominator_filter = "resource.type' in block
    call = load(MODULES / "relayflow").modules["monitoring"].body
    services = call["services"]
    for module in ("start_flow", "worker", "poller", "api"):
        assert f"${{module.{module}.name}}" in services


def test_every_alert_links_a_runbook_section_that_exists() -> None:
    anchors = _anchors(RUNBOOK.read_text(encoding="utf-8"))
    sections = {section for _, section in ALERTS.values()} | {"http-5xx"}
    # A section no alert links: the dashboard's waiting flows per tenant.
    assert "tenant-waiting" in anchors
    assert sections <= anchors, sections - anchors
    written = set(re.findall(r'runbook\s+=\s+"([\w-]+)"', _main()))
    assert written == sections
    policy = load(MONITORING).resource("google_monitoring_alert_policy", "main").body
    documentation = only_block(policy, "documentation")
    assert "${var.runbook_url}#${each.value.runbook}" in documentation["content"]
    assert only_block(documentation, "links")["url"] == "${var.runbook_url}#${each.value.runbook}"
    assert documentation["mime_type"] == "text/markdown"


def test_a_breaker_that_does_not_close_for_the_threshold_pages() -> None:
    block = _alert_block("breaker_open")
    # The lowest state of each series over a window that holds an export stays above closed
    # (0) for the whole duration: open (2) or half-open (1) all along, per dependency.
    assert 'aligner            = "ALIGN_MIN"' in block
    assert 'reducer            = "REDUCE_MAX"' in block
    assert re.search(r"threshold\s+= 0\n", block)
    assert 'duration           = "${var.breaker_open_threshold_s}s"' in block
    assert 'alignment_period   = "120s"' in block
    assert 'severity     = "ERROR"' in block
    variable = load(MONITORING).variables["breaker_open_threshold_s"].body
    assert variable["default"] == 600
    (validation,) = variable["validation"]
    assert "var.breaker_open_threshold_s % 60 == 0" in validation["condition"]
    # Each alert aligns over its own period; the breaker's is shorter than the default.
    policy = load(MONITORING).resource("google_monitoring_alert_policy", "main").body
    condition = only_block(only_block(policy, "conditions"), "condition_threshold")
    aggregations = only_block(condition, "aggregations")
    assert aggregations["alignment_period"] == "${each.value.alignment_period}"
    # Set per environment through alert_thresholds, whole minutes by default.
    relayflow = load(MODULES / "relayflow")
    call = relayflow.modules["monitoring"].body
    assert call["breaker_open_threshold_s"] == "${var.alert_thresholds.breaker_open_s}"
    assert "breaker_open_s           = optional(number, 600)" in (
        (MODULES / "relayflow" / "variables.tf").read_text(encoding="utf-8")
    )
    for path in env_dirs():
        assert "breaker_open_s" in load(path).variables["alert_thresholds"].body["type"]


def test_any_abandoned_clean_up_pages_with_its_flow_and_tenant() -> None:
    # A failed flow's undo was given up after the undo window: an effect may be live at a
    # client API. One is enough: the delta of the counter over a period above 0, at once.
    block = _alert_block("cleanup_abandoned")
    assert 'aligner            = "ALIGN_DELTA"' in block
    assert 'reducer            = "REDUCE_SUM"' in block
    assert 'group_by           = ["metric.label.flow", "metric.label.tenant"]' in block
    assert re.search(r"threshold\s+= 0\n", block)
    assert 'duration           = "0s"' in block
    assert 'severity           = "CRITICAL"' in block
    assert "${local.workload_resource}" in block
    assert 'runbook            = "cleanup-abandoned"' in block
    # The counter the engine adds to (relayflow/metrics.py), under the name exported.
    metrics = (REPO / "relayflow" / "metrics.py").read_text(encoding="utf-8")
    assert '"relayflow.cleanups.abandoned"' in metrics
    descriptor = load(MONITORING).locals["metrics"]["relayflow.cleanups.abandoned"]
    assert set(descriptor["labels"]) == {"flow", "tenant"}


def test_alerts_notify_the_channels_given_per_environment() -> None:
    policy = load(MONITORING).resource("google_monitoring_alert_policy", "main").body
    assert policy["notification_channels"] == "${var.notification_channels}"
    call = load(MODULES / "relayflow").modules["monitoring"].body
    assert call["notification_channels"] == "${var.notification_channels}"
    assert call["runbook_url"] == "${var.runbook_url}"
    for path in env_dirs():
        module = load(path).modules["relayflow"].body
        assert module["notification_channels"] == "${var.notification_channels}"
        assert module["runbook_url"] == "${var.runbook_url}"


def test_aligners_and_reducers_are_ones_the_provider_allows() -> None:
    schema = load_schema()["google"]["resource"]["google_monitoring_alert_policy"]
    aggregations = schema["blocks"]["conditions"]["blocks"]["condition_threshold"]["blocks"][
        "aggregations"
    ]["attributes"]
    aligners = set(re.findall(r'aligner\s+=\s+"(\w+)"', _main()))
    reducers = set(re.findall(r'reducer\s+=\s+"(\w+)"', _main()))
    assert aligners and aligners <= set(aggregations["per_series_aligner"]["allowed"])
    assert reducers and reducers <= set(aggregations["cross_series_reducer"]["allowed"])
    severities = set(re.findall(r'severity\s+=\s+"(\w+)"', _main()))
    assert severities <= set(schema["attributes"]["severity"]["allowed"])


# --- Dashboard ----------------------------------------------------------------------------------


def _template_variables() -> dict[str, str]:
    body = load(MONITORING).resource("google_monitoring_dashboard", "main").body
    expression = body["dashboard_json"]
    assert 'templatefile("${path.module}/dashboard.json.tftpl"' in expression
    return dict(re.findall(r"(\w+)\s+=\s+([^\n,}]+)", expression.split("{", 1)[1]))


def _rendered() -> dict[str, Any]:
    text = (MONITORING / "dashboard.json.tftpl").read_text(encoding="utf-8")
    samples = {
        "dead_letter_subscription": "flow-requests-dead-hold",
        "queues_regex": "flow-steps|flow-polls|flow-steps-high|flow-polls-high",
        "services_regex": "start-flow|worker|poller|api",
        "overdue_age_threshold_s": "600",
        "error_ratio_5xx": "0.05",
    }
    used = set(re.findall(r"\$\{(\w+)\}", text))
    assert used == set(_template_variables()) == set(samples)
    for name, value in samples.items():
        text = text.replace("${" + name + "}", value)
    data: dict[str, Any] = json.loads(text)
    return data


def test_the_dashboard_renders_to_json_and_shows_every_figure_alerted_on() -> None:
    dashboard = _rendered()
    filters = " ".join(re.findall(r'"filter": "((?:[^"\\]|\\.)*)"', json.dumps(dashboard)))
    for name in METRICS:
        assert f"{WORKLOAD}/{name}" in filters, name
    for signal in (
        "pubsub.googleapis.com/subscription/num_undelivered_messages",
        "run.googleapis.com/request_count",
        "cloudtasks.googleapis.com/queue/task_attempt_count",
        "response_code_class",
    ):
        assert signal in filters, signal


def _tiles_by_metric() -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for tile in _rendered()["mosaicLayout"]["tiles"]:
        for data_set in tile["widget"]["xyChart"]["dataSets"]:
            query = data_set["timeSeriesQuery"].get("timeSeriesFilter")
            if query:
                metric = re.search(r'metric\.type="([^"]+)"', query["filter"])
                assert metric
                found.setdefault(metric.group(1), []).append(query["aggregation"])
    return found


def test_the_dashboard_shows_breakers_by_dependency_and_tenants_waiting_and_started() -> None:
    tiles = _tiles_by_metric()
    groups = {
        "relayflow.breaker.state": ["metric.label.dependency"],
        "relayflow.breaker.transitions": ["metric.label.dependency", "metric.label.to"],
        "relayflow.dependency.deferred": ["metric.label.dependency", "metric.label.reason"],
        "relayflow.dependency.calls": ["metric.label.dependency", "metric.label.outcome"],
        "relayflow.tenant.waiting": ["metric.label.tenant"],
        "relayflow.flows.started": ["metric.label.tenant"],
        "relayflow.cleanups.ended": ["metric.label.state"],
        "relayflow.cleanups.abandoned": ["metric.label.flow", "metric.label.tenant"],
    }
    for metric, group_by in groups.items():
        aggregations = tiles[f"{WORKLOAD}/{metric}"]
        assert any(a["groupByFields"] == group_by for a in aggregations), metric
    # Gauges every instance reports alike are shown at their highest, never summed.
    for gauge in ("relayflow.breaker.state", "relayflow.tenant.waiting"):
        (aggregation,) = tiles[f"{WORKLOAD}/{gauge}"]
        assert aggregation["crossSeriesReducer"] == "REDUCE_MAX", gauge


def test_the_runbook_says_how_to_check_breakers_and_tenants() -> None:
    runbook = RUNBOOK.read_text(encoding="utf-8")
    breaker = runbook.split("\n## breaker-open\n", 1)[1].split("\n## ", 1)[0]
    for needle in ("relayflow breakers", "/breakers", "dependencies", "budget"):
        assert needle in breaker, needle
    tenants = runbook.split("\n## tenant-waiting\n", 1)[1].split("\n## ", 1)[0]
    for needle in (
        "relayflow tenants list",
        "relayflow tenants pause TENANT --reason",
        "relayflow tenants resume TENANT --reason",
        "localhost:8080/tenants",
        "POST /tenants/TENANT:pause",
        "POST /tenants/TENANT:resume",
        "max_running",
        "starts_per_s",
    ):
        assert needle in tenants, needle


def test_the_dashboard_tiles_fit_the_grid_without_overlapping() -> None:
    layout = _rendered()["mosaicLayout"]
    taken: set[tuple[int, int]] = set()
    for tile in layout["tiles"]:
        assert tile["widget"]["title"]
        assert tile["xPos"] + tile["width"] <= layout["columns"]
        cells = {
            (x, y)
            for x in range(tile["xPos"], tile["xPos"] + tile["width"])
            for y in range(tile["yPos"], tile["yPos"] + tile["height"])
        }
        assert not cells & taken, tile["widget"]["title"]
        taken |= cells


def test_the_dashboard_and_alert_outputs_reach_the_operator() -> None:
    for path in env_dirs():
        outputs = load(path).outputs
        assert {"dashboard_url", "alert_policy_ids", "api_proxy_command"} <= set(outputs)


def test_the_runbook_is_where_the_alerts_say() -> None:
    assert RUNBOOK.exists()
    example = (MODULES.parent / "envs" / "prod" / "terraform.tfvars.example").read_text(
        encoding="utf-8"
    )
    assert re.search(r'runbook_url\s+=\s+"https://[^"#]+/docs/runbook\.md"', example)
