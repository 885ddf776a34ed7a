variable "project_id" {
  description = "Project of the relayflow environment (metrics, alert policies and the dashboard live there)."
  type        = string
}

variable "notification_channels" {
  description = "Notification channel ids (projects/P/notificationChannels/N) every alert notifies; create them once per project, e.g. the on-call's email or PagerDuty."
  type        = list(string)
  default     = []

  validation {
    condition     = alltrue([for c in var.notification_channels : can(regex("^projects/[^/]+/notificationChannels/[0-9]+$", c))])
    error_message = "Each notification channel must be an id of the form projects/P/notificationChannels/N."
  }
}

variable "runbook_url" {
  description = "URL of docs/runbook.md in the repository this environment is deployed from; each alert links its section (#anchor)."
  type        = string

  validation {
    condition     = startswith(var.runbook_url, "https://") && !strcontains(var.runbook_url, "#")
    error_message = "runbook_url must be an https URL without a #fragment (each alert adds its own)."
  }
}

variable "services" {
  description = "Cloud Run service names whose 5xx ratio is alerted on, one policy each."
  type        = list(string)
}

variable "queues" {
  description = "Cloud Tasks queue names whose failing attempts are alerted on: each kind's own name (its shard 0); its shards 1 .. queue_shards - 1 (NAME-i) are watched with it."
  type        = list(string)
}

variable "queue_shards" {
  description = "Queues of each kind (RELAYFLOW_QUEUE_SHARDS): shard 0 is the name in `queues`, shard i >= 1 NAME-i."
  type        = number
  default     = 1

  validation {
    condition     = var.queue_shards >= 1 && floor(var.queue_shards) == var.queue_shards
    error_message = "queue_shards is a whole number, at least 1."
  }
}

variable "dead_letter_subscription" {
  description = "Name of the pull subscription that holds dead-lettered start messages."
  type        = string
}

variable "overdue_age_threshold_s" {
  description = "Alert when the oldest overdue flow is older than this many seconds."
  type        = number
  default     = 600
}

variable "failed_flows_per_minute" {
  description = "Alert when more flows of one type than this end FAILED or TIMED_OUT per minute (over 5 minutes)."
  type        = number
  default     = 1
}

variable "error_ratio_5xx" {
  description = "Alert when more than this share (0-1) of a service's requests answer 5xx (over 5 minutes)."
  type        = number
  default     = 0.05

  validation {
    condition     = var.error_ratio_5xx > 0 && var.error_ratio_5xx < 1
    error_message = "error_ratio_5xx must be between 0 and 1."
  }
}

variable "task_failures_per_minute" {
  description = "Alert when more task attempts than this per minute fail on one kind of queue (over 10 minutes); each of its shards alerts at its share (this / queue_shards)."
  type        = number
  default     = 6
}

variable "breaker_open_threshold_s" {
  description = "Alert when a dependency's breaker has not closed for this many seconds (open, or half-open while it probes)."
  type        = number
  default     = 600

  validation {
    condition     = var.breaker_open_threshold_s >= 60 && var.breaker_open_threshold_s % 60 == 0
    error_message = "breaker_open_threshold_s must be whole minutes (a multiple of 60, Cloud Monitoring's condition durations are), at least 60."
  }
}

variable "alignment_period" {
  description = "Alignment period of the alert conditions (the breaker's has its own, two export intervals)."
  type        = string
  default     = "300s"
}

variable "metric_resource_types" {
  description = "Monitored resource types the OpenTelemetry exporter writes relayflow's metrics against."
  type        = list(string)
  default     = ["generic_task", "generic_node"]
}

variable "metric_descriptor_wait_s" {
  description = "Seconds to wait, once, after creating the metric descriptors before creating the alert policies on them (Cloud Monitoring needs up to 10 minutes)."
  type        = number
  default     = 600
}

variable "labels" {
  description = "User labels applied to the alert policies."
  type        = map(string)
  default     = {}
}
