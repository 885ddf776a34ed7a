# Cloud Tasks queues. Names, rate limits and retry settings come from relayflow/topology.json via
# the caller, so the local Cloud Tasks emulator and the cloud queues behave alike (DESIGN invariant 10).
# A task's dispatch deadline is per task (set by relayflow.queue when it creates the task), not here.

resource "google_cloud_tasks_queue" "main" {
  for_each = var.queues

  project  = var.project_id
  location = var.location
  name     = each.value.name

  rate_limits {
    max_dispatches_per_second = each.value.max_dispatches_per_second
    max_concurrent_dispatches = each.value.max_concurrent_dispatches
  }

  retry_config {
    max_attempts       = each.value.max_attempts
    max_retry_duration = "${each.value.max_retry_duration_s}s"
    min_backoff        = "${each.value.min_backoff_s}s"
    max_backoff        = "${each.value.max_backoff_s}s"
    max_doublings      = each.value.max_doublings
  }

  stackdriver_logging_config {
    sampling_ratio = var.log_sampling_ratio
  }
}
