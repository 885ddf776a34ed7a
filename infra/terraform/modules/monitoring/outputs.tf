output "alert_policy_ids" {
  description = "Alert policy ids keyed by alert (dead_letter_backlog, overdue_flows, sweeper_rescues, failed_flows, task_failures, breaker_open, http_5xx_<service>)."
  value       = { for k, p in google_monitoring_alert_policy.main : k => p.name }
}

output "dashboard_id" {
  description = "Id of the relayflow dashboard."
  value       = google_monitoring_dashboard.main.id
}

output "dashboard_url" {
  description = "Console URL of the relayflow dashboard."
  value       = "https://console.cloud.google.com/monitoring/dashboards/builder/${element(reverse(split("/", google_monitoring_dashboard.main.id)), 0)}?project=${var.project_id}"
}

output "metric_types" {
  description = "Metric types of relayflow's own metrics, keyed by OpenTelemetry name."
  value       = local.metric_type
}
