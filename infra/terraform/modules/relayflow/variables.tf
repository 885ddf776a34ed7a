variable "project_id" {
  description = "Project that holds one relayflow environment (topic and queue names are fixed by topology.json, so one environment per project)."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be a valid Google Cloud project id."
  }
}

variable "region" {
  description = "Region of the Cloud Run services, Cloud Tasks queues and the scheduler job (RELAYFLOW_LOCATION)."
  type        = string
}

variable "image" {
  description = "Container image of relayflow (one image, the component is chosen by the COMPONENT variable); pin it by digest."
  type        = string
}

variable "client_api_url" {
  description = "Base URL of the external client API the flows talk to (RELAYFLOW_CLIENT_API_URL)."
  type        = string

  validation {
    condition     = startswith(var.client_api_url, "https://")
    error_message = "client_api_url must be an https URL."
  }
}

variable "firestore_location" {
  description = "Firestore location: a multi-region (nam5, eur3) or a region. Cannot change after creation."
  type        = string
}

variable "firestore_point_in_time_recovery" {
  description = "Keep 7 days of Firestore point-in-time recovery."
  type        = bool
  default     = false
}

variable "api_invoker_members" {
  description = "Principals (people, groups, tools, external systems that complete callback tokens at POST /callbacks/{token}) allowed to call the api service, keyed by a static label, e.g. { oncall = \"group:relayflow-oncall@example.com\" }."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for m in values(var.api_invoker_members) : !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "The api is never public: no allUsers or allAuthenticatedUsers."
  }

  validation {
    condition     = !contains(keys(var.api_invoker_members), "pubsub_push")
    error_message = "The key pubsub_push is taken by the Pub/Sub push account's grant on the api (signals)."
  }
}

variable "sweep_schedule" {
  description = "Cron schedule (UTC) of the sweeper call."
  type        = string
  default     = "* * * * *"
}

variable "max_instances" {
  description = "Maximum Cloud Run instances per component."
  type = object({
    start-flow = number
    worker     = number
    poller     = number
    api        = number
  })
  default = {
    start-flow = 10
    worker     = 10
    poller     = 10
    api        = 3
  }
}

variable "tasks_log_sampling_ratio" {
  description = "Fraction of Cloud Tasks operations logged (0.0 - 1.0)."
  type        = number
  default     = 0.1
}

variable "labels" {
  description = "Labels applied to services, topics and subscriptions."
  type        = map(string)
  default     = {}
}

variable "deletion_protection" {
  description = "Protect the services and the Firestore database against deletion."
  type        = bool
  default     = true
}

variable "trace_exporter" {
  description = "Where the services send OpenTelemetry spans (RELAYFLOW_TRACE_EXPORTER): gcp (Cloud Trace) or none."
  type        = string
  default     = "gcp"

  validation {
    condition     = contains(["gcp", "none"], var.trace_exporter)
    error_message = "trace_exporter must be gcp or none."
  }
}

variable "app" {
  description = "The flows this deployment runs (RELAYFLOW_APP): module.path:attr naming a Registry or a callable that takes Settings, importable in the image."
  type        = string
  default     = "relayflow.apps.registration:build_registry"

  validation {
    condition     = can(regex("^[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$", var.app))
    error_message = "app must be module.path:attr, e.g. myflows.flows:registry."
  }
}

variable "metrics_exporter" {
  description = "Where the services send OpenTelemetry metrics (RELAYFLOW_METRICS_EXPORTER): gcp (Cloud Monitoring, which the alerts and dashboard read) or none."
  type        = string
  default     = "gcp"

  validation {
    condition     = contains(["gcp", "none"], var.metrics_exporter)
    error_message = "metrics_exporter must be gcp or none."
  }
}

variable "min_instances" {
  description = "Minimum Cloud Run instances per component (0 scales to zero; 1 avoids cold starts on the task path)."
  type = object({
    start-flow = number
    worker     = number
    poller     = number
    api        = number
  })
  default = {
    start-flow = 0
    worker     = 0
    poller     = 0
    api        = 0
  }
}

variable "api_ingress" {
  description = "Network ingress of the api: INGRESS_TRAFFIC_ALL lets operators in api_invoker_members reach it with `gcloud run services proxy` (IAM still refuses everyone else); INGRESS_TRAFFIC_INTERNAL_ONLY keeps it inside the VPC."
  type        = string
  default     = "INGRESS_TRAFFIC_ALL"

  validation {
    condition     = contains(["INGRESS_TRAFFIC_INTERNAL_ONLY", "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER", "INGRESS_TRAFFIC_ALL"], var.api_ingress)
    error_message = "api_ingress must be INGRESS_TRAFFIC_INTERNAL_ONLY, INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER or INGRESS_TRAFFIC_ALL."
  }
}

variable "request_publishers" {
  description = "Producers: principals allowed to publish on the requests topic, keyed by a static label, e.g. { orders = \"serviceAccount:orders@p.iam.gserviceaccount.com\" }."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for m in values(var.request_publishers) : !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "request_publishers must not contain allUsers or allAuthenticatedUsers."
  }
}

variable "signal_publishers" {
  description = "External systems allowed to complete callback tokens by publishing on the signals topic ({\"token\", \"output\"} or {\"token\", \"error\"}), keyed by a static label."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for m in values(var.signal_publishers) : !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "signal_publishers must not contain allUsers or allAuthenticatedUsers."
  }
}

variable "result_subscribers" {
  description = "Consumers: principals allowed to attach their own subscriptions to the results topic, keyed by a static label."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for m in values(var.result_subscribers) : !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "result_subscribers must not contain allUsers or allAuthenticatedUsers."
  }
}

variable "dead_letter_replayers" {
  description = "Principals allowed to read the dead-letter hold subscription and publish the messages back where they came from, the requests or the signals topic (replay), keyed by a static label."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for m in values(var.dead_letter_replayers) : !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "dead_letter_replayers must not contain allUsers or allAuthenticatedUsers."
  }
}

variable "notification_channels" {
  description = "Cloud Monitoring notification channel ids (projects/P/notificationChannels/N) that every relayflow alert notifies."
  type        = list(string)
  default     = []
}

variable "runbook_url" {
  description = "URL of docs/runbook.md in the repository this environment is deployed from; each alert links its section."
  type        = string
}

variable "alert_thresholds" {
  description = "Alert thresholds: oldest overdue flow age (s), FAILED/TIMED_OUT flows per minute of one type, 5xx share of a service's requests (0-1), failing task attempts per minute on one queue."
  type = object({
    overdue_age_s            = optional(number, 600)
    failed_flows_per_minute  = optional(number, 1)
    error_ratio_5xx          = optional(number, 0.05)
    task_failures_per_minute = optional(number, 6)
  })
  default = {}
}
