# Cloud Tasks queues. Names, rate limits and retry settings come from relayflow/topology.json via
# the caller, so the local Cloud Tasks emulator and the cloud queues behave alike (DESIGN invariant 10).
# A task's dispatch deadline is per task (set by relayflow.queue when it creates the task), not here.
#
# Each kind of queue is `shards` queues (a queue dispatches at most 500 tasks/s:
# https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues#ratelimits).
# Shard 0 of each kind is `main`, keyed by the kind as before sharding: a deployment that grows
# from one shard keeps its queue, its state address and the tasks in it. Shards i >= 1 are
# `shard`, which Terraform refuses to destroy: lowering the count would delete queues that may
# hold flows' tasks (every task of a flow is on its shard; Cloud Tasks deletes a queue "even if
# it has tasks in it", and its name may not be created again for days:
# https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues/delete).

locals {
  first = { for key, q in var.queues : key => q if q.shard == 0 }
  more  = { for key, q in var.queues : key => q if q.shard > 0 }
}

resource "google_cloud_tasks_queue" "main" {
  for_each = local.first

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

# The same settings as `main` (prevent_destroy takes no expression, so shards >= 1 are a
# resource of their own).
resource "google_cloud_tasks_queue" "shard" {
  for_each = local.more

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

  # The shard count may grow, never shrink (infra/terraform/README.md, "Queue shards").
  lifecycle {
    prevent_destroy = true
  }
}
