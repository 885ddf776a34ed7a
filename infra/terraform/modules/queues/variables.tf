variable "project_id" {
  description = "Project that holds the queues."
  type        = string
}

variable "location" {
  description = "Cloud Tasks location, e.g. us-central1."
  type        = string
}

variable "queues" {
  description = "Every queue, keyed by role (steps, polls, and their high-priority twins steps_high, polls_high) for shard 0 and role-i for shard i >= 1: the `queues` section of relayflow/topology.json, each kind's shards expanded by the caller. Durations are seconds."
  type = map(object({
    name                      = string
    shard                     = optional(number, 0)
    max_dispatches_per_second = number
    max_concurrent_dispatches = number
    max_attempts              = number
    max_retry_duration_s      = number
    min_backoff_s             = number
    max_backoff_s             = number
    max_doublings             = number
  }))

  validation {
    condition = alltrue([
      for q in values(var.queues) :
      can(regex("^[A-Za-z0-9-]{1,100}$", q.name)) && q.max_dispatches_per_second <= 500 && q.max_concurrent_dispatches <= 5000 && q.shard >= 0
    ])
    error_message = "Queue names are [A-Za-z0-9-]{1,100}; max_dispatches_per_second <= 500; max_concurrent_dispatches <= 5000; shard >= 0."
  }
}

variable "log_sampling_ratio" {
  description = "Fraction of task operations written to Cloud Logging (0.0 - 1.0)."
  type        = number
  default     = 0.1

  validation {
    condition     = var.log_sampling_ratio >= 0 && var.log_sampling_ratio <= 1
    error_message = "log_sampling_ratio must be between 0 and 1."
  }
}
