variable "project_id" {
  description = "Project that holds the topics and subscriptions."
  type        = string
}

variable "pubsub_service_agent" {
  description = "IAM member of the project's Pub/Sub service agent (serviceAccount:service-N@gcp-sa-pubsub...), taken from a google_project_service_identity so that it exists before it is granted anything."
  type        = string

  validation {
    condition     = can(regex("^serviceAccount:service-[0-9]+@gcp-sa-pubsub\\.iam\\.gserviceaccount\\.com$", var.pubsub_service_agent))
    error_message = "pubsub_service_agent must be the IAM member of the Pub/Sub service agent."
  }
}

variable "topics" {
  description = "Topic names by role: the `topics` section of relayflow/topology.json."
  type = object({
    requests    = string
    results     = string
    dead_letter = string
    signals     = string
  })
}

variable "start_subscription" {
  description = "The push subscription that starts flows: `subscriptions.start` of relayflow/topology.json. Durations are seconds."
  type = object({
    name                  = string
    topic                 = string
    ack_deadline_s        = number
    max_delivery_attempts = number
    dead_letter_topic     = string
    min_backoff_s         = number
    max_backoff_s         = number
  })

  validation {
    condition     = var.start_subscription.max_delivery_attempts >= 5 && var.start_subscription.max_delivery_attempts <= 100
    error_message = "Pub/Sub accepts max_delivery_attempts between 5 and 100."
  }
}

variable "signals_subscription" {
  description = "The push subscription that delivers signals (callback completions) to the api: `subscriptions.signals` of relayflow/topology.json. Durations are seconds."
  type = object({
    name                  = string
    topic                 = string
    ack_deadline_s        = number
    max_delivery_attempts = number
    dead_letter_topic     = string
    min_backoff_s         = number
    max_backoff_s         = number
  })

  validation {
    condition     = var.signals_subscription.max_delivery_attempts >= 5 && var.signals_subscription.max_delivery_attempts <= 100
    error_message = "Pub/Sub accepts max_delivery_attempts between 5 and 100."
  }
}

variable "signals_push_endpoint" {
  description = "HTTPS URL the signals subscription pushes to (the api's POST /signals)."
  type        = string

  validation {
    condition     = startswith(var.signals_push_endpoint, "https://")
    error_message = "signals_push_endpoint must be an https URL."
  }
}

variable "signals_push_audience" {
  description = "Audience of the OIDC token Pub/Sub attaches to each signal push (the api's URL)."
  type        = string
}

variable "signals_push_after" {
  description = "Ids of what the api needs before it can accept a signal (its invoker grant for the push account, database, queues, grants); the signals subscription is created after all of them."
  type        = list(string)
  default     = []
}

variable "push_after" {
  description = "Ids of what the push endpoint needs before it can accept a message (its invoker grant, database, queues, grants); the push subscription is created after all of them."
  type        = list(string)
  default     = []
}

variable "hold_subscriptions" {
  description = "Pull subscriptions that keep messages for inspection (dead letters, results), keyed by role."
  type = map(object({
    name           = string
    topic          = string
    ack_deadline_s = number
  }))
  default = {}
}

variable "push_url" {
  description = "HTTPS URL of the start-flow service. Each start subscription (the shared one and each tenant's) pushes to {push_url}/projects/{project_id}/topics/{its topic}: functions-framework names the topic in the CloudEvent's source from that path, and the start function takes the tenant from it."
  type        = string

  validation {
    condition     = startswith(var.push_url, "https://") && !endswith(var.push_url, "/")
    error_message = "push_url must be an https URL without a trailing slash."
  }
}

variable "tenant_requests" {
  description = "Each tenant named in RELAYFLOW_TENANTS, with the names of its own start topic and push subscription (relayflow/topology.json tenant_requests, {tenant} filled in). Each subscription delivers as the shared start subscription does."
  type = map(object({
    topic        = string
    subscription = string
  }))
  default = {}
}

variable "push_audience" {
  description = "Audience of the OIDC token Pub/Sub attaches to each push (the start-flow service URL)."
  type        = string
}

variable "push_service_account_email" {
  description = "Service account whose OIDC token authenticates each push (start and signals); needs run.invoker on both endpoints."
  type        = string
}

variable "message_retention_s" {
  description = "How long the hold subscriptions retain messages, in seconds (max 31 days)."
  type        = number
  default     = 604800

  validation {
    condition     = var.message_retention_s >= 600 && var.message_retention_s <= 2678400
    error_message = "message_retention_s must be between 600 (10 min) and 2678400 (31 days)."
  }
}

variable "labels" {
  description = "Labels applied to topics and subscriptions."
  type        = map(string)
  default     = {}
}

variable "request_publishers" {
  description = "Principals allowed to publish flow requests on the shared requests topic (roles/pubsub.publisher on it), which starts the default tenant's flows only, keyed by a static label."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for m in values(var.request_publishers) : !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "request_publishers must not contain allUsers or allAuthenticatedUsers."
  }
}

variable "tenant_publishers" {
  description = "Principals allowed to start a named tenant's flows: tenant => { static label => member }, each granted roles/pubsub.publisher on that tenant's own topic only. Every tenant must be in tenant_requests."
  type        = map(map(string))
  default     = {}

  validation {
    condition     = alltrue([for m in flatten([for members in values(var.tenant_publishers) : values(members)]) : !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "tenant_publishers must not contain allUsers or allAuthenticatedUsers."
  }
}

variable "signal_publishers" {
  description = "Principals allowed to publish signals that complete callback tokens (roles/pubsub.publisher on the signals topic), keyed by a static label."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for m in values(var.signal_publishers) : !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "signal_publishers must not contain allUsers or allAuthenticatedUsers."
  }
}

variable "result_subscribers" {
  description = "Principals allowed to attach their own subscriptions to the results topic (roles/pubsub.subscriber on it), keyed by a static label."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for m in values(var.result_subscribers) : !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "result_subscribers must not contain allUsers or allAuthenticatedUsers."
  }
}

variable "dead_letter_replayers" {
  description = "Principals allowed to read the dead-letter hold subscription and publish the messages back where they came from, the requests topic, a tenant's own topic or the signals topic (replay), keyed by a static label."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for m in values(var.dead_letter_replayers) : !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "dead_letter_replayers must not contain allUsers or allAuthenticatedUsers."
  }
}

variable "api_member" {
  description = "IAM member of the api's runtime account: it lists and replays dead letters for the console and the CLI, so it gets subscriber on the dead-letter hold subscription and publisher on the topics a dead letter is replayed to (requests, each tenant's, signals)."
  type        = string

  validation {
    condition     = startswith(var.api_member, "serviceAccount:")
    error_message = "api_member is the api's runtime account: serviceAccount:EMAIL."
  }
}

variable "kms_key_name" {
  description = "Cloud KMS key that encrypts the messages of every topic (CMEK), whose Pub/Sub service agent may use it; null: Google-managed encryption."
  type        = string
  default     = null
}
