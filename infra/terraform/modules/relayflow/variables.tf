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

variable "api_viewers" {
  description = "Who may read flows, tenants, breakers, rejected messages and dead letters in the api and its console, as IAM members: user:EMAIL or serviceAccount:EMAIL, not groups (the api gives a caller the role its token's email is listed under). Each gets run.invoker and run.viewer on the api, so it reaches it with `gcloud run services proxy`."
  type        = list(string)
  default     = []
  nullable    = false

  validation {
    condition     = alltrue([for m in var.api_viewers : can(regex("^(user|serviceAccount):[^@\\s:]+@[^@\\s]+\\.[^@\\s]+$", m))])
    error_message = "api_viewers holds user:EMAIL or serviceAccount:EMAIL members; not group:, domain:, allUsers or allAuthenticatedUsers."
  }
}

variable "api_operators" {
  description = "Who may also cancel, retry, replay dead letters, pause and resume tenants and complete callback tokens: user:EMAIL or serviceAccount:EMAIL, granted as api_viewers are."
  type        = list(string)
  default     = []
  nullable    = false

  validation {
    condition     = alltrue([for m in var.api_operators : can(regex("^(user|serviceAccount):[^@\\s:]+@[^@\\s]+\\.[^@\\s]+$", m))])
    error_message = "api_operators holds user:EMAIL or serviceAccount:EMAIL members; not group:, domain:, allUsers or allAuthenticatedUsers."
  }
}

variable "api_token_audiences" {
  description = "Audiences the api accepts in callers' ID tokens besides its own URL (RELAYFLOW_API_AUDIENCES). Empty, the default: only tokens minted for the api's URL, e.g. by `gcloud auth print-identity-token --impersonate-service-account=SA --audiences=API_URL` handed to `gcloud run services proxy --token`. Adding gcloud's OAuth client (32555940559.apps.googleusercontent.com) lets a person's plain `gcloud run services proxy` in, but every ID token gcloud mints for that person carries that audience whatever service it was for, so any service the person sent one to could replay it here: such tokens are accepted for api_token_max_age_s only. See infra/terraform/README.md, \"People and the api\"."
  type        = list(string)
  default     = []
  nullable    = false

  validation {
    condition     = alltrue([for a in var.api_token_audiences : trimspace(a) != "" && a == trimspace(a)])
    error_message = "api_token_audiences holds audiences (a URL or an OAuth client id), none empty or padded."
  }
}

variable "api_token_max_age_s" {
  description = "How old a token for one of api_token_audiences may be when the api gets it, in seconds since it was issued (RELAYFLOW_API_AUDIENCE_MAX_AGE_S, set only when api_token_audiences is not empty). It bounds how long a token minted for such an audience can be replayed; tokens for the api's own URL keep their lifetime (an hour)."
  type        = number
  default     = 300
  nullable    = false

  validation {
    condition     = var.api_token_max_age_s >= 30 && var.api_token_max_age_s <= 3600
    error_message = "api_token_max_age_s must be from 30 to 3600 seconds."
  }
}

variable "api_origins" {
  description = "Origins (scheme://host[:port]) allowed to send state-changing requests to the api from a browser, besides the api's own URL's origin, which is always allowed (RELAYFLOW_API_ORIGINS, set only when not empty). Empty, the default: relayflow's default, http://localhost:8080 and http://127.0.0.1:8080, where the documented `gcloud run services proxy --port 8080` serves the console. A list replaces that default: name the origin of a proxy on another port or of a load balancer in front of the api, and the two above if people still use the proxy on port 8080."
  type        = list(string)
  default     = []
  nullable    = false

  validation {
    condition     = alltrue([for o in var.api_origins : can(regex("^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?$", o))])
    error_message = "api_origins holds origins: scheme://host or scheme://host:port (http or https), no path, no trailing slash."
  }
}

variable "api_completers" {
  description = "External systems that complete callback tokens at POST /callbacks/{token} and may do nothing else: serviceAccount:EMAIL (or user:EMAIL), granted run.invoker on the api. The Pub/Sub push account that delivers the signals topic to /signals is added by the module."
  type        = list(string)
  default     = []
  nullable    = false

  validation {
    condition     = alltrue([for m in var.api_completers : can(regex("^(user|serviceAccount):[^@\\s:]+@[^@\\s]+\\.[^@\\s]+$", m))])
    error_message = "api_completers holds serviceAccount:EMAIL or user:EMAIL members; not group:, domain:, allUsers or allAuthenticatedUsers."
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

variable "concurrency" {
  description = "Concurrent requests per Cloud Run instance, per component. The worker, poller and api run one gunicorn process with this many threads (each request holds a thread while it waits on Firestore, Cloud Tasks or the client API), so Cloud Run never sends an instance more requests than it has threads to serve; docs/capacity.md derives the sizes."
  type = object({
    start-flow = number
    worker     = number
    poller     = number
    api        = number
  })
  default = {
    start-flow = 16
    worker     = 16
    poller     = 16
    api        = 8
  }

  validation {
    # Cloud Run: at most 1000 concurrent requests per instance (https://cloud.google.com/run/docs/about-concurrency).
    condition     = alltrue([for n in values(var.concurrency) : n >= 1 && n <= 1000 && floor(n) == n])
    error_message = "Each component's concurrency must be a whole number from 1 to 1000."
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
  description = "Network ingress of the api: INGRESS_TRAFFIC_ALL lets the people in api_viewers and api_operators reach it with `gcloud run services proxy` (IAM still refuses everyone else); INGRESS_TRAFFIC_INTERNAL_ONLY keeps it inside the VPC."
  type        = string
  default     = "INGRESS_TRAFFIC_ALL"

  validation {
    condition     = contains(["INGRESS_TRAFFIC_INTERNAL_ONLY", "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER", "INGRESS_TRAFFIC_ALL"], var.api_ingress)
    error_message = "api_ingress must be INGRESS_TRAFFIC_INTERNAL_ONLY, INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER or INGRESS_TRAFFIC_ALL."
  }
}

variable "request_publishers" {
  description = "Producers of the default tenant's flows: principals allowed to publish on the shared requests topic, which starts the default tenant's flows only (a message naming another tenant is refused), keyed by a static label, e.g. { orders = \"serviceAccount:orders@p.iam.gserviceaccount.com\" }. A named tenant's producers are tenant_publishers."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for m in values(var.request_publishers) : !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "request_publishers must not contain allUsers or allAuthenticatedUsers."
  }
}

variable "tenant_publishers" {
  description = "Producers of a named tenant's flows: tenant => { static label => member }, each granted roles/pubsub.publisher on that tenant's own topic only (topology.json tenant_requests; the tenant_topics output names them), e.g. { acme = { orders = \"serviceAccount:orders@acme.iam.gserviceaccount.com\" } }. Every tenant must be named in tenants (it has a topic only then)."
  type        = map(map(string))
  default     = {}
  nullable    = false

  validation {
    condition     = alltrue([for m in flatten([for members in values(var.tenant_publishers) : values(members)]) : !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "tenant_publishers must not contain allUsers or allAuthenticatedUsers."
  }

  validation {
    condition     = alltrue([for name in keys(var.tenant_publishers) : can(regex("^[a-z0-9][a-z0-9-]{0,62}$", name))])
    error_message = "tenant_publishers is keyed by tenant names, each matching ^[a-z0-9][a-z0-9-]{0,62}$."
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
  description = "Principals allowed to read the dead-letter hold subscription and publish the messages back where they came from, the requests topic, a tenant's own topic or the signals topic (replay), keyed by a static label. The api's own account gets the same rights for the console's and the CLI's replays."
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
  description = "Alert thresholds: oldest overdue flow age (s), FAILED/TIMED_OUT flows per minute of one type, 5xx share of a service's requests (0-1), failing task attempts per minute on one queue, how long a dependency's breaker may stay open (s, whole minutes)."
  type = object({
    overdue_age_s            = optional(number, 600)
    failed_flows_per_minute  = optional(number, 1)
    error_ratio_5xx          = optional(number, 0.05)
    task_failures_per_minute = optional(number, 6)
    breaker_open_s           = optional(number, 600)
  })
  default = {}
}

variable "tenants" {
  description = "Tenants' limits and priorities, the RELAYFLOW_TENANTS every service reads: { default = POLICY, tenants = { NAME = POLICY } } with POLICY = { max_running (whole number, 0 = no limit), starts_per_s (0 = no limit), priority (\"high\": tasks on the high-priority queues, or \"low\"), paused }. A tenant not named gets default; unset fields take relayflow's defaults (no limits, low, not paused). The same JSON as `relayflow local up --tenants FILE` (infra/terraform/README.md, \"Tenants and dependencies\"); Terraform drops a field its type does not name, so check the RELAYFLOW_TENANTS the plan shows."
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

  validation {
    condition     = alltrue([for name in keys(coalesce(var.tenants.tenants, {})) : can(regex("^[a-z0-9][a-z0-9-]{0,62}$", name))])
    error_message = "Tenant names must match ^[a-z0-9][a-z0-9-]{0,62}$: lower-case letters, digits and hyphens, 1 to 63 of them, not starting with a hyphen."
  }

  validation {
    condition = alltrue([
      for p in concat(var.tenants.default == null ? [] : [var.tenants.default], values(coalesce(var.tenants.tenants, {}))) :
      contains(["high", "low"], coalesce(p.priority, "low"))
    ])
    error_message = "A tenant's priority must be \"high\" or \"low\"."
  }

  validation {
    condition = alltrue([
      for p in concat(var.tenants.default == null ? [] : [var.tenants.default], values(coalesce(var.tenants.tenants, {}))) :
      floor(coalesce(p.max_running, 0)) == coalesce(p.max_running, 0) && coalesce(p.max_running, 0) >= 0 && coalesce(p.max_running, 0) <= 10000
    ])
    error_message = "A tenant's max_running must be a whole number from 0 (no limit) to 10000."
  }

  validation {
    condition = alltrue([
      for p in concat(var.tenants.default == null ? [] : [var.tenants.default], values(coalesce(var.tenants.tenants, {}))) :
      coalesce(p.starts_per_s, 0) >= 0 && coalesce(p.starts_per_s, 0) <= 10000
    ])
    error_message = "A tenant's starts_per_s must be from 0 (no limit) to 10000."
  }
}

variable "dependencies" {
  description = "Circuit breakers and retry budgets of the dependencies flows call, the RELAYFLOW_DEPENDENCIES every service reads: { default = BREAKER, dependencies = { NAME = BREAKER } } with BREAKER = { enabled, window_s (seconds of calls the failure rate is taken over), min_calls (calls in the window before it may open), failure_rate (0-1: the share of failed calls that opens it), open_s (how long it stays open before it probes, 1 s by default; longer after failed probes, up to max_open_s), probes (successful probe calls that close it; the first goes alone), retry_budget (0-1: retries as a share of calls), min_retries (retries allowed whatever the budget) }. A dependency not named gets default; unset fields take relayflow's defaults (infra/terraform/README.md, \"Tenants and dependencies\")."
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

  validation {
    condition     = alltrue([for name in keys(coalesce(var.dependencies.dependencies, {})) : can(regex("^[a-z][a-z0-9-]{0,62}$", name))])
    error_message = "Dependency names must match ^[a-z][a-z0-9-]{0,62}$: a lower-case letter, then lower-case letters, digits and hyphens, at most 63 in all."
  }

  validation {
    condition = alltrue([
      for b in concat(var.dependencies.default == null ? [] : [var.dependencies.default], values(coalesce(var.dependencies.dependencies, {}))) :
      alltrue([for share in [b.failure_rate, b.retry_budget] : coalesce(share, 0) >= 0 && coalesce(share, 0) <= 1])
    ])
    error_message = "A breaker's failure_rate and retry_budget are shares, from 0 to 1."
  }

  validation {
    condition = alltrue([
      for b in concat(var.dependencies.default == null ? [] : [var.dependencies.default], values(coalesce(var.dependencies.dependencies, {}))) :
      alltrue([for count in [b.min_calls, b.min_retries] : floor(coalesce(count, 0)) == coalesce(count, 0) && coalesce(count, 0) >= 0])
      && floor(coalesce(b.probes, 1)) == coalesce(b.probes, 1) && coalesce(b.probes, 1) >= 1
    ])
    error_message = "A breaker's min_calls and min_retries must be whole numbers from 0, its probes a whole number from 1."
  }

  validation {
    condition = alltrue([
      for b in concat(var.dependencies.default == null ? [] : [var.dependencies.default], values(coalesce(var.dependencies.dependencies, {}))) :
      alltrue([for seconds in [b.window_s, b.open_s, b.max_open_s] : coalesce(seconds, 1) > 0])
      && coalesce(b.max_open_s, b.open_s, 0) >= coalesce(b.open_s, 0)
    ])
    error_message = "A breaker's window_s, open_s and max_open_s must be more than 0 seconds, and max_open_s at least open_s."
  }
}

variable "api_scopes" {
  description = "Which tenants each api caller may see and operate, the RELAYFLOW_API_SCOPES the api reads: the caller's email (without user: or serviceAccount:) => tenant names, e.g. { \"alice@acme.com\" = [\"acme\"] }. A caller not listed sees every tenant its role (api_viewers, api_operators) allows."
  type        = map(list(string))
  default     = {}
  nullable    = false

  validation {
    condition     = alltrue([for caller in keys(var.api_scopes) : can(regex("^[^@\\s]+@[^@\\s]+\\.[^@\\s]+$", caller))])
    error_message = "api_scopes is keyed by the caller's email, e.g. alice@acme.com or orders@p.iam.gserviceaccount.com."
  }

  validation {
    condition     = alltrue([for tenant in flatten(values(var.api_scopes)) : can(regex("^[a-z0-9][a-z0-9-]{0,62}$", tenant))])
    error_message = "api_scopes lists tenant names, each matching ^[a-z0-9][a-z0-9-]{0,62}$."
  }
}

variable "queue_shards" {
  description = "Cloud Tasks queues of each kind (steps, polls and their high twins), the RELAYFLOW_QUEUE_SHARDS every service reads; null: relayflow/topology.json's (1). A queue dispatches at most 500 tasks/s, so a kind's ceiling is 500 x shards; shard 0 keeps the kind's name, shard i is NAME-i. Grow it (following Cloud Tasks' 500/50/5 ramp onto the new shards), never lower it: a lowered count would delete shards that hold flows' tasks, so Terraform refuses to destroy a shard (infra/terraform/README.md, \"Queue shards\")."
  type        = number
  default     = null

  validation {
    condition     = var.queue_shards == null || try(var.queue_shards >= 1 && var.queue_shards <= 250 && floor(var.queue_shards) == var.queue_shards, false)
    error_message = "queue_shards is a whole number in 1..250 (four kinds of queue, 1,000 queues per project and region by default), or null for topology.json's."
  }
}

variable "analytics" {
  description = "Result events in BigQuery (docs/analytics.md): a dataset and a day-partitioned table of every result event, written by a BigQuery subscription on the results topic. enabled: create them (on by default); location: the dataset's BigQuery location (US, EU or a region; cannot change after creation); retention_days: how long a day's partition is kept."
  type = object({
    enabled        = optional(bool, true)
    location       = optional(string, "US")
    retention_days = optional(number, 90)
  })
  default = {}

  validation {
    condition     = var.analytics.retention_days >= 1 && floor(var.analytics.retention_days) == var.analytics.retention_days
    error_message = "analytics.retention_days must be a whole number of days, at least 1."
  }
}

variable "sensitive_keyset" {
  description = "The Tink keyset that seals flows' sensitive fields (RELAYFLOW_SENSITIVE_KEYSET), as JSON, encrypted by sensitive_key_uri's key: `relayflow keyset --kms-key-uri URI` prints one. Encrypted, it is no secret. Needed when a flow of the app marks a field sensitive (a service refuses to start without it); empty, the default: none is set."
  type        = string
  default     = ""
  nullable    = false
}

variable "sensitive_key_uri" {
  description = "The Cloud KMS key that encrypts sensitive_keyset (RELAYFLOW_SENSITIVE_KEY_URI), as gcp-kms://projects/P/locations/L/keyRings/R/cryptoKeys/K. Every service's account needs roles/cloudkms.cryptoKeyDecrypter on it (docs/deploy.md, 'Sensitive fields')."
  type        = string
  default     = ""
  nullable    = false

  validation {
    condition     = var.sensitive_key_uri == "" || can(regex("^gcp-kms://projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$", var.sensitive_key_uri))
    error_message = "sensitive_key_uri is gcp-kms://projects/P/locations/L/keyRings/R/cryptoKeys/K, or empty."
  }
}

variable "api_sensitive_readers" {
  description = "Emails of viewers and operators who see flows' sensitive fields in clear in the api, the console and the CLI, each read logged (RELAYFLOW_API_SENSITIVE_READERS); everyone else sees [redacted]."
  type        = list(string)
  default     = []
  nullable    = false
}

variable "retention_days" {
  description = "Days a finished flow is kept, RELAYFLOW_RETENTION_DAYS for every service (Firestore's TTL deletes a flow's document this long after it ended), and the age at which the offload bucket deletes a payload: one figure for both, in whole days, as the bucket's lifecycle counts them."
  type        = number
  default     = 30
  nullable    = false

  validation {
    condition     = var.retention_days >= 1 && var.retention_days <= 3650 && floor(var.retention_days) == var.retention_days
    error_message = "retention_days must be a whole number of days from 1 to 3650."
  }
}

variable "offload_bucket_name" {
  description = "Name of the bucket that holds offloaded payloads (RELAYFLOW_OFFLOAD_BUCKET); null: PROJECT_ID-relayflow-offload. Bucket names are global: set one if that name is taken."
  type        = string
  default     = null
}

variable "cmek" {
  description = "Customer-managed encryption keys for every store of flow data (infra/terraform/README.md, \"Customer-managed encryption keys\"): with enabled = true, a Cloud KMS key ring in the region (and in Firestore's location if it differs) with one key per store (firestore, pubsub, tasks, storage), each granted to its service agent alone and rotated every rotation_period (seconds with an s suffix, 1 to 90 days); the Firestore database, every topic and the offload bucket name their key, and the tasks_cmek_command output sets Cloud Tasks' (one gcloud command: the provider has no resource for it). Firestore takes a key only when its database is created. grant_wait_s: how long the first apply waits after the grants, before creating anything that names a key (IAM propagation)."
  type = object({
    enabled         = bool
    rotation_period = optional(string, "7776000s")
    grant_wait_s    = optional(number, 120)
  })
  default  = { enabled = false }
  nullable = false

  validation {
    condition     = var.cmek.grant_wait_s >= 0 && var.cmek.grant_wait_s <= 900
    error_message = "cmek.grant_wait_s must be from 0 to 900 seconds."
  }
}
