variable "project_id" {
  description = "Project that holds the topics and subscriptions."
  type        = string
}

variable "project_number" {
  description = "Number of project_id; names the Pub/Sub service agent that moves dead letters."
  type        = string
}

variable "topics" {
  description = "Topic names by role: the `topics` section of relayflow/topology.json."
  type = object({
    requests    = string
    results     = string
    dead_letter = string
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

variable "hold_subscriptions" {
  description = "Pull subscriptions that keep messages for inspection (dead letters, results), keyed by role."
  type = map(object({
    name           = string
    topic          = string
    ack_deadline_s = number
  }))
  default = {}
}

variable "push_endpoint" {
  description = "HTTPS URL the start subscription pushes to (the start-flow service)."
  type        = string

  validation {
    condition     = startswith(var.push_endpoint, "https://")
    error_message = "push_endpoint must be an https URL."
  }
}

variable "push_audience" {
  description = "Audience of the OIDC token Pub/Sub attaches to each push (the start-flow service URL)."
  type        = string
}

variable "push_service_account_email" {
  description = "Service account whose OIDC token authenticates each push; needs run.invoker on the endpoint."
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
