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
  description = "Principals (people, groups, tools) allowed to call the api service, keyed by a static label, e.g. { oncall = \"group:relayflow-oncall@example.com\" }."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for m in values(var.api_invoker_members) : !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "The api is never public: no allUsers or allAuthenticatedUsers."
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
