# Alert policies and a dashboard for one relayflow environment. Each alert's documentation says
# what to do first and links its section of docs/runbook.md.
#
# relayflow's own figures are OpenTelemetry metrics the services export to Cloud Monitoring as
# workload.googleapis.com/<name>. Cloud Monitoring refuses an alert policy on a metric it has
# never seen (404 "Cannot find metric(s)"), and a fresh project has seen none: the descriptors
# are created here first, then left to the exporter, which owns them from its first write.

locals {
  workload = "workload.googleapis.com"

  # Every shard of every kind of queue: shard 0 is named as the kind (var.queues), shard i >= 1
  # NAME-i. A pattern, not a list of every name, so the filters stay short at any shard count.
  # (With one shard no queue has a -i suffix: the pattern then matches the names alone.)
  queues_regex = "(${join("|", var.queues)})(-[1-9][0-9]*)?"

  # Name => descriptor; labels are the ones each metric carries (labels are never removed, and
  # the exporter adds any it writes that are missing).
  metrics = {
    "relayflow.flows.started"              = { kind = "CUMULATIVE", value_type = "INT64", unit = "1", labels = ["flow", "tenant"], description = "Flows started." }
    "relayflow.flows.ended"                = { kind = "CUMULATIVE", value_type = "INT64", unit = "1", labels = ["flow", "status", "code", "tenant"], description = "Flows ended, by status and code." }
    "relayflow.step.duration"              = { kind = "CUMULATIVE", value_type = "DISTRIBUTION", unit = "s", labels = ["flow", "step", "kind", "outcome", "tenant"], description = "Duration of one step run (action, poll or compensation)." }
    "relayflow.flow.polls"                 = { kind = "CUMULATIVE", value_type = "DISTRIBUTION", unit = "1", labels = ["flow", "status"], description = "Polls per ended flow." }
    "relayflow.step.retries"               = { kind = "CUMULATIVE", value_type = "INT64", unit = "1", labels = ["flow", "step", "code"], description = "Step retries after a retryable error." }
    "relayflow.claim.conflicts"            = { kind = "CUMULATIVE", value_type = "INT64", unit = "1", labels = ["flow", "step"], description = "Deliveries that found another delivery holding the step's claim." }
    "relayflow.sweeper.rescues"            = { kind = "CUMULATIVE", value_type = "INT64", unit = "1", labels = ["flow"], description = "Overdue flows the sweeper re-enqueued." }
    "relayflow.sweeper.oldest_overdue_age" = { kind = "GAUGE", value_type = "DOUBLE", unit = "s", labels = ["flow"], description = "Age of the oldest overdue non-terminal flow the sweeper saw." }
    "relayflow.messages.rejected"          = { kind = "CUMULATIVE", value_type = "INT64", unit = "1", labels = ["flow", "code"], description = "Start messages rejected as malformed." }
    "relayflow.breaker.state"              = { kind = "GAUGE", value_type = "INT64", unit = "1", labels = ["dependency"], description = "State of a dependency's breaker: 0 closed, 1 half-open, 2 open." }
    "relayflow.breaker.transitions"        = { kind = "CUMULATIVE", value_type = "INT64", unit = "1", labels = ["dependency", "to"], description = "Breaker transitions, by the state entered." }
    "relayflow.dependency.deferred"        = { kind = "CUMULATIVE", value_type = "INT64", unit = "1", labels = ["dependency", "reason"], description = "Steps deferred instead of calling a dependency (reason: open, half_open, budget)." }
    "relayflow.dependency.calls"           = { kind = "CUMULATIVE", value_type = "INT64", unit = "1", labels = ["dependency", "outcome"], description = "Calls to a dependency, by outcome (ok, failed)." }
    "relayflow.tenant.waiting"             = { kind = "GAUGE", value_type = "INT64", unit = "1", labels = ["tenant"], description = "Flows waiting for their tenant's limits to admit them." }
    "relayflow.cleanups.ended"             = { kind = "CUMULATIVE", value_type = "INT64", unit = "1", labels = ["flow", "tenant", "state"], description = "Clean-ups of ended flows over, by state (done, abandoned)." }
    "relayflow.cleanups.abandoned"         = { kind = "CUMULATIVE", value_type = "INT64", unit = "1", labels = ["flow", "tenant"], description = "Clean-ups given up after the undo window: a failed flow may have left an effect live." }
  }
  metric_type = { for name, d in google_monitoring_metric_descriptor.relayflow : name => d.type }

  # Where the OpenTelemetry exporter puts relayflow's series: generic_task when the resource
  # detector finds a service name and instance id (Cloud Run), generic_node otherwise.
  workload_resource = "resource.type = one_of(${join(", ", [for t in var.metric_resource_types : "\"${t}\""])})"

  alerts = merge(
    {
      dead_letter_backlog = {
        display_name       = "relayflow: messages dead-lettered"
        runbook            = "dead-letter-backlog"
        summary            = "Start messages or signals failed every delivery and wait in the dead-letter hold subscription. Read where each came from, fix the cause, replay them there."
        severity           = "ERROR"
        filter             = "resource.type = \"pubsub_subscription\" AND resource.label.subscription_id = \"${var.dead_letter_subscription}\" AND metric.type = \"pubsub.googleapis.com/subscription/num_undelivered_messages\""
        denominator_filter = null
        alignment_period   = var.alignment_period
        aligner            = "ALIGN_MAX"
        reducer            = "REDUCE_MAX"
        group_by           = []
        threshold          = 0
        duration           = "0s"
      }
      overdue_flows = {
        display_name       = "relayflow: a flow is overdue"
        runbook            = "overdue-flows"
        summary            = "A running flow's next task is late by more than ${var.overdue_age_threshold_s} s and the sweeper has not got it moving."
        severity           = "ERROR"
        filter             = "metric.type = \"${local.metric_type["relayflow.sweeper.oldest_overdue_age"]}\" AND ${local.workload_resource}"
        denominator_filter = null
        alignment_period   = var.alignment_period
        aligner            = "ALIGN_MAX"
        reducer            = "REDUCE_MAX"
        group_by           = ["metric.label.flow"]
        threshold          = var.overdue_age_threshold_s
        duration           = "0s"
      }
      sweeper_rescues = {
        display_name       = "relayflow: the sweeper rescued flows"
        runbook            = "sweeper-rescues"
        summary            = "Flows lost their next task and the sweeper re-enqueued them: something drops tasks (failed creates after commit, purged queues, crashes)."
        severity           = "WARNING"
        filter             = "metric.type = \"${local.metric_type["relayflow.sweeper.rescues"]}\" AND ${local.workload_resource}"
        denominator_filter = null
        alignment_period   = var.alignment_period
        aligner            = "ALIGN_DELTA"
        reducer            = "REDUCE_SUM"
        group_by           = ["metric.label.flow"]
        threshold          = 0
        duration           = "0s"
      }
      failed_flows = {
        display_name       = "relayflow: flows ending FAILED or TIMED_OUT"
        runbook            = "failed-flows"
        summary            = "More than ${var.failed_flows_per_minute} flows per minute of one type end FAILED or TIMED_OUT. The result code says why."
        severity           = "ERROR"
        filter             = "metric.type = \"${local.metric_type["relayflow.flows.ended"]}\" AND metric.label.status = one_of(\"FAILED\", \"TIMED_OUT\") AND ${local.workload_resource}"
        denominator_filter = null
        alignment_period   = var.alignment_period
        aligner            = "ALIGN_RATE"
        reducer            = "REDUCE_SUM"
        group_by           = ["metric.label.flow"]
        threshold          = var.failed_flows_per_minute / 60
        duration           = "300s"
      }
      task_failures = {
        display_name = "relayflow: Cloud Tasks attempts failing"
        runbook      = "task-failures"
        summary      = "Task deliveries to the worker or poller keep failing (more than ${var.task_failures_per_minute} per minute): Cloud Tasks is retrying them."
        severity     = "ERROR"
        # Any response but success counts; the label's spelling (OK or 200) is matched both ways.
        filter             = "resource.type = \"cloud_tasks_queue\" AND resource.label.queue_id = monitoring.regex.full_match(\"(${join("|", var.queues)})(-[1-9][0-9]*)?\") AND metric.type = \"cloudtasks.googleapis.com/queue/task_attempt_count\" AND NOT metric.label.response_code = monitoring.regex.full_match(\"(?i)ok|2[0-9][0-9]\")"
        denominator_filter = null
        alignment_period   = var.alignment_period
        aligner            = "ALIGN_RATE"
        reducer            = "REDUCE_SUM"
        group_by           = ["resource.label.queue_id"]
        # Per queue: a kind's failures spread evenly over its shards (a flow's shard is a hash
        # of its key), so each shard gets its share of the kind's threshold.
        threshold = var.task_failures_per_minute / var.queue_shards / 60
        duration  = "600s"
      }
      # A failed flow's undo of a side effect was given up after the undo window
      # (RELAYFLOW_UNDO_WINDOW_S): the effect may be live at the client API. Each one pages.
      cleanup_abandoned = {
        display_name       = "relayflow: a failed flow's clean-up was abandoned"
        runbook            = "cleanup-abandoned"
        summary            = "A failed flow's undo of a side effect was given up after the undo window: the effect (a registration, say) may still be live at the client API. Find the flow, check the effect, undo it."
        severity           = "CRITICAL"
        filter             = "metric.type = \"${local.metric_type["relayflow.cleanups.abandoned"]}\" AND ${local.workload_resource}"
        denominator_filter = null
        alignment_period   = var.alignment_period
        aligner            = "ALIGN_DELTA"
        reducer            = "REDUCE_SUM"
        group_by           = ["metric.label.flow", "metric.label.tenant"]
        threshold          = 0
        duration           = "0s"
      }
      breaker_open = {
        display_name = "relayflow: a dependency's breaker stays open"
        runbook      = "breaker-open"
        summary      = "A dependency's breaker has not closed for ${var.breaker_open_threshold_s / 60} minutes: its calls keep failing, and the steps that call it are deferred (they wait, they do not fail)."
        severity     = "ERROR"
        filter       = "metric.type = \"${local.metric_type["relayflow.breaker.state"]}\" AND ${local.workload_resource}"
        # Open (2) or half-open (1, probing) all along: the lowest state of each series over a
        # window that holds at least one export (every 60 s by default) stays above closed (0).
        denominator_filter = null
        alignment_period   = "120s"
        aligner            = "ALIGN_MIN"
        reducer            = "REDUCE_MAX"
        group_by           = ["metric.label.dependency"]
        threshold          = 0
        duration           = "${var.breaker_open_threshold_s}s"
      }
    },
    {
      for service in var.services : "http_5xx_${service}" => {
        display_name       = "relayflow: ${service} answers 5xx"
        runbook            = "http-5xx"
        summary            = "More than ${var.error_ratio_5xx * 100}% of the requests to ${service} fail with 5xx."
        severity           = "ERROR"
        filter             = "resource.type = \"cloud_run_revision\" AND resource.label.service_name = \"${service}\" AND metric.type = \"run.googleapis.com/request_count\" AND metric.label.response_code_class = \"5xx\""
        denominator_filter = "resource.type = \"cloud_run_revision\" AND resource.label.service_name = \"${service}\" AND metric.type = \"run.googleapis.com/request_count\""
        alignment_period   = var.alignment_period
        aligner            = "ALIGN_RATE"
        reducer            = "REDUCE_SUM"
        group_by           = []
        threshold          = var.error_ratio_5xx
        duration           = "300s"
      }
    },
  )
}

# Seeds the descriptors so that the alert policies below can be created on a fresh project; the
# exporter updates them on its first write (CreateMetricDescriptor updates an existing one), so
# Terraform never touches them again.
resource "google_monitoring_metric_descriptor" "relayflow" {
  for_each = local.metrics

  project      = var.project_id
  type         = "${local.workload}/${each.key}"
  display_name = each.key
  description  = each.value.description
  metric_kind  = each.value.kind
  value_type   = each.value.value_type
  unit         = each.value.unit

  dynamic "labels" {
    for_each = toset(each.value.labels)
    content {
      key         = labels.value
      value_type  = "STRING"
      description = "relayflow ${labels.value}."
    }
  }

  lifecycle {
    ignore_changes = all
  }
}

# A new descriptor takes "up to 10 minutes to become available" to alert policies (Google's own
# 404 message says so); waiting once, when the descriptors are created, lets the first apply
# converge instead of failing on its alert policies.
resource "terraform_data" "metrics_visible" {
  triggers_replace = [for d in google_monitoring_metric_descriptor.relayflow : d.type]

  provisioner "local-exec" {
    command = "sleep ${var.metric_descriptor_wait_s}"
  }
}

resource "google_monitoring_alert_policy" "main" {
  for_each = local.alerts

  project               = var.project_id
  display_name          = each.value.display_name
  combiner              = "OR"
  severity              = each.value.severity
  notification_channels = var.notification_channels
  user_labels           = var.labels

  documentation {
    mime_type = "text/markdown"
    subject   = each.value.display_name
    content   = "${each.value.summary}\n\nWhat to do: [runbook, ${each.value.runbook}](${var.runbook_url}#${each.value.runbook})."

    links {
      display_name = "Runbook: ${each.value.runbook}"
      url          = "${var.runbook_url}#${each.value.runbook}"
    }
  }

  conditions {
    display_name = each.value.display_name

    condition_threshold {
      filter             = each.value.filter
      denominator_filter = each.value.denominator_filter
      comparison         = "COMPARISON_GT"
      threshold_value    = each.value.threshold
      duration           = each.value.duration

      aggregations {
        alignment_period     = each.value.alignment_period
        per_series_aligner   = each.value.aligner
        cross_series_reducer = each.value.reducer
        group_by_fields      = each.value.group_by
      }

      dynamic "denominator_aggregations" {
        for_each = each.value.denominator_filter == null ? [] : [each.value]
        content {
          alignment_period     = denominator_aggregations.value.alignment_period
          per_series_aligner   = denominator_aggregations.value.aligner
          cross_series_reducer = denominator_aggregations.value.reducer
          group_by_fields      = denominator_aggregations.value.group_by
        }
      }

      trigger {
        count = 1
      }
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  depends_on = [terraform_data.metrics_visible]
}

# The same figures as the alerts, and the rest of relayflow's metrics, on one page.
resource "google_monitoring_dashboard" "main" {
  project = var.project_id
  dashboard_json = templatefile("${path.module}/dashboard.json.tftpl", {
    dead_letter_subscription = var.dead_letter_subscription
    queues_regex             = local.queues_regex
    services_regex           = join("|", var.services)
    overdue_age_threshold_s  = var.overdue_age_threshold_s
    error_ratio_5xx          = var.error_ratio_5xx
  })

  depends_on = [terraform_data.metrics_visible]
}
