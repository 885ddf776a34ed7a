variable "project_id" {
  description = "Project of the staging environment (one environment per project)."
  type        = string
}

variable "region" {
  description = "Region of the Cloud Run services, queues and scheduler job."
  type        = string
  default     = "us-central1"
}

variable "image" {
  description = "Container image, pinned by digest: the one the build pipeline tested and promoted (cloudbuild.yaml passes it)."
  type        = string
}

variable "app" {
  description = "RELAYFLOW_APP: module.path:attr of the Registry (or a callable taking Settings) the services load."
  type        = string
  default     = "relayflow.apps.registration:build_registry"
}

variable "client_api_url" {
  description = "Base URL of the external client API for staging."
  type        = string
}

variable "firestore_location" {
  description = "Firestore location (cannot change after creation); nam5 spans us-central1."
  type        = string
  default     = "nam5"
}

variable "firestore_point_in_time_recovery" {
  description = "Keep 7 days of Firestore point-in-time recovery."
  type        = bool
  default     = true
}

variable "deletion_protection" {
  description = "Protect the services and the Firestore database against deletion."
  type        = bool
  default     = true
}

variable "min_instances" {
  description = "Minimum Cloud Run instances per component."
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

variable "sweep_schedule" {
  description = "Cron schedule (UTC) of the sweeper call."
  type        = string
  default     = "* * * * *"
}

variable "tasks_log_sampling_ratio" {
  description = "Fraction of Cloud Tasks operations logged (0.0 - 1.0)."
  type        = number
  default     = 0.5
}

variable "trace_exporter" {
  description = "Where the services send spans: gcp (Cloud Trace) or none."
  type        = string
  default     = "gcp"
}

variable "metrics_exporter" {
  description = "Where the services send metrics: gcp (Cloud Monitoring; the alerts read it) or none."
  type        = string
  default     = "gcp"
}

variable "labels" {
  description = "Extra labels on services, topics, subscriptions and alert policies (app and environment are added to every resource by the provider)."
  type        = map(string)
  default     = {}
}

variable "api_ingress" {
  description = "Network ingress of the api: INGRESS_TRAFFIC_ALL (operators use `gcloud run services proxy`; IAM still applies) or INGRESS_TRAFFIC_INTERNAL_ONLY."
  type        = string
  default     = "INGRESS_TRAFFIC_ALL"
}

variable "api_viewers" {
  description = "Who may read flows in the api and its console: user:EMAIL or serviceAccount:EMAIL (not groups); each may reach it with `gcloud run services proxy`."
  type        = list(string)
  default     = []
}

variable "api_operators" {
  description = "Who may also cancel, retry, replay, pause tenants and complete callback tokens: user:EMAIL or serviceAccount:EMAIL (not groups)."
  type        = list(string)
  default     = []
}

variable "api_token_audiences" {
  description = "Audiences the api accepts besides its own URL (RELAYFLOW_API_AUDIENCES). Empty, the default: only tokens minted for the api's URL. gcloud's OAuth client (32555940559.apps.googleusercontent.com) admits a person's plain `gcloud run services proxy`, and with it any gcloud token of that person replayed from another service, for api_token_max_age_s: infra/terraform/README.md, \"People and the api\"."
  type        = list(string)
  default     = []
}

variable "api_token_max_age_s" {
  description = "Seconds since issue after which the api refuses a token for one of api_token_audiences (tokens for its own URL keep their hour)."
  type        = number
  default     = 300
}

variable "api_origins" {
  description = "Browser origins allowed to send state-changing requests to the api besides its own URL's (RELAYFLOW_API_ORIGINS); empty: http://localhost:8080 and http://127.0.0.1:8080 (the proxy); a list replaces those."
  type        = list(string)
  default     = []
}

variable "api_completers" {
  description = "External systems that complete callback tokens over HTTP (POST /callbacks/{token}) and may do nothing else: serviceAccount:EMAIL."
  type        = list(string)
  default     = []
}

variable "request_publishers" {
  description = "Producers allowed to publish on the shared requests topic, which starts the default tenant's flows only, keyed by a static label."
  type        = map(string)
  default     = {}
}

variable "tenant_publishers" {
  description = "Producers of a named tenant's flows, tenant => { static label => member }: publisher on that tenant's own topic only. Each tenant must be named in tenants."
  type        = map(map(string))
  default     = {}
}

variable "signal_publishers" {
  description = "External systems allowed to complete callback tokens by publishing on the signals topic, keyed by a static label."
  type        = map(string)
  default     = {}
}

variable "result_subscribers" {
  description = "Consumers allowed to attach subscriptions to the results topic, keyed by a static label."
  type        = map(string)
  default     = {}
}

variable "dead_letter_replayers" {
  description = "Principals allowed to read and replay dead-lettered start messages (to the requests topic or a tenant's own) and signals, keyed by a static label."
  type        = map(string)
  default     = {}
}

variable "notification_channels" {
  description = "Cloud Monitoring notification channel ids every alert notifies."
  type        = list(string)
  default     = []
}

variable "runbook_url" {
  description = "URL of docs/runbook.md in the repository this environment is deployed from (alerts link its sections)."
  type        = string
}

variable "alert_thresholds" {
  description = "Alert thresholds (see modules/relayflow); unset ones take the module's defaults."
  type = object({
    overdue_age_s            = optional(number)
    failed_flows_per_minute  = optional(number)
    error_ratio_5xx          = optional(number)
    task_failures_per_minute = optional(number)
    breaker_open_s           = optional(number)
  })
  default = {}
}

variable "tenants" {
  description = "Tenants' limits and priorities (RELAYFLOW_TENANTS; fields and checks in modules/relayflow). Keep them in a JSON file the local stack reads too: infra/terraform/README.md, \"Tenants and dependencies\"."
  type = object({
    default = optional(object({
      max_running  = optional(number)
      starts_per_s = optional(number)
      priority     = optional(string)
      paused       = optional(bool)
    }))
    tenants = optional(map(object({
      max_running  = optional(number)
      starts_per_s = optional(number)
      priority     = optional(string)
      paused       = optional(bool)
    })))
  })
  default  = {}
  nullable = false
}

variable "dependencies" {
  description = "Dependencies' circuit breakers and retry budgets (RELAYFLOW_DEPENDENCIES; fields and checks in modules/relayflow)."
  type = object({
    default = optional(object({
      enabled      = optional(bool)
      window_s     = optional(number)
      min_calls    = optional(number)
      failure_rate = optional(number)
      open_s       = optional(number)
      max_open_s   = optional(number)
      probes       = optional(number)
      retry_budget = optional(number)
      min_retries  = optional(number)
    }))
    dependencies = optional(map(object({
      enabled      = optional(bool)
      window_s     = optional(number)
      min_calls    = optional(number)
      failure_rate = optional(number)
      open_s       = optional(number)
      max_open_s   = optional(number)
      probes       = optional(number)
      retry_budget = optional(number)
      min_retries  = optional(number)
    })))
  })
  default  = {}
  nullable = false
}

variable "api_scopes" {
  description = "Which tenants each api caller (by email) may see and operate (RELAYFLOW_API_SCOPES); callers not listed see every tenant their role allows."
  type        = map(list(string))
  default     = {}
  nullable    = false
}

variable "analytics" {
  description = "Result events in BigQuery (docs/analytics.md): enabled (default true), location (the dataset's BigQuery location, default US), retention_days (how long a day's partition is kept)."
  type = object({
    enabled        = optional(bool, true)
    location       = optional(string, "US")
    retention_days = optional(number, 30)
  })
  default = {}
}

variable "sensitive_keyset" {
  description = "The Tink keyset that seals flows' sensitive fields (RELAYFLOW_SENSITIVE_KEYSET), encrypted by sensitive_key_uri's key: `relayflow keyset --kms-key-uri URI` prints one. Empty: none (the app's flows mark no field)."
  type        = string
  default     = ""
}

variable "sensitive_key_uri" {
  description = "The Cloud KMS key that encrypts sensitive_keyset (RELAYFLOW_SENSITIVE_KEY_URI): gcp-kms://projects/P/locations/L/keyRings/R/cryptoKeys/K."
  type        = string
  default     = ""
}

variable "api_sensitive_readers" {
  description = "Emails of viewers and operators who see flows' sensitive fields in clear (RELAYFLOW_API_SENSITIVE_READERS), each read logged."
  type        = list(string)
  default     = []
}

variable "retention_days" {
  description = "Days a finished flow's document and its offloaded payloads are kept (RELAYFLOW_RETENTION_DAYS, the offload bucket's lifecycle), whole days."
  type        = number
  default     = 30
  nullable    = false
}

variable "offload_bucket_name" {
  description = "Name of the offload bucket; null: PROJECT_ID-relayflow-offload (bucket names are global)."
  type        = string
  default     = null
}

variable "cmek" {
  description = "Customer-managed encryption keys for every store of flow data in staging (fields and checks in modules/relayflow; infra/terraform/README.md, \"Customer-managed encryption keys\"). Firestore takes its key only when its database is created."
  type = object({
    enabled         = bool
    rotation_period = optional(string)
    grant_wait_s    = optional(number)
  })
  default  = { enabled = false, rotation_period = "7776000s" }
  nullable = false
}
