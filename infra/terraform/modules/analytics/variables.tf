variable "project_id" {
  description = "Project that holds the dataset, the table and the subscriptions."
  type        = string
}

variable "location" {
  description = "BigQuery location of the dataset (US, EU, or a region); cannot change after creation."
  type        = string
  default     = "US"
}

variable "dataset_id" {
  description = "Dataset id: the `analytics.dataset` of relayflow/topology.json."
  type        = string
}

variable "table_id" {
  description = "Table id of the result events: the `analytics.table` of relayflow/topology.json."
  type        = string
}

variable "retention_days" {
  description = "Days a day's partition of result events is kept."
  type        = number
  default     = 90

  validation {
    condition     = var.retention_days >= 1 && floor(var.retention_days) == var.retention_days
    error_message = "retention_days must be a whole number of days, at least 1."
  }
}

variable "results_topic_id" {
  description = "Id (projects/P/topics/T) of the topic result events are published on."
  type        = string
}

variable "subscription" {
  description = "The BigQuery subscription: `analytics.subscription` of relayflow/topology.json. Durations are seconds."
  type = object({
    name                  = string
    max_delivery_attempts = number
    dead_letter_topic     = string
    min_backoff_s         = number
    max_backoff_s         = number
  })

  validation {
    condition     = var.subscription.max_delivery_attempts >= 5 && var.subscription.max_delivery_attempts <= 100
    error_message = "Pub/Sub accepts max_delivery_attempts between 5 and 100."
  }
}

variable "dead_letter" {
  description = "The dead-letter topic of the BigQuery subscription and the pull subscription that holds what reaches it: `analytics.dead_letter` of relayflow/topology.json."
  type = object({
    name           = string
    topic          = string
    ack_deadline_s = number
  })
}

variable "message_retention_s" {
  description = "How long the dead-letter hold retains events, in seconds (max 31 days)."
  type        = number
  default     = 604800

  validation {
    condition     = var.message_retention_s >= 600 && var.message_retention_s <= 2678400
    error_message = "message_retention_s must be between 600 (10 min) and 2678400 (31 days)."
  }
}

variable "pubsub_service_agent" {
  description = "IAM member of the project's Pub/Sub service agent, which writes the rows; taken from a google_project_service_identity so that it exists before it is granted anything."
  type        = string

  validation {
    condition     = can(regex("^serviceAccount:service-[0-9]+@gcp-sa-pubsub\\.iam\\.gserviceaccount\\.com$", var.pubsub_service_agent))
    error_message = "pubsub_service_agent must be the IAM member of the Pub/Sub service agent."
  }
}

variable "kms_key_name" {
  description = "The Cloud KMS key (projects/P/locations/L/keyRings/R/cryptoKeys/K, in the dataset's location) the dataset and its table are encrypted with; null: Google-managed encryption. BigQuery's service account must hold encrypter/decrypter on it before the dataset names it."
  type        = string
  default     = null
}

variable "topic_kms_key_name" {
  description = "The Cloud KMS key the dead-letter topic is encrypted with (the relayflow module's Pub/Sub key); null: Google-managed encryption."
  type        = string
  default     = null
}

variable "deletion_protection" {
  description = "Refuse to delete (or replace) the table of result events."
  type        = bool
  default     = true
}

variable "labels" {
  description = "Labels applied to the dataset, the table, the topic and the subscriptions."
  type        = map(string)
  default     = {}
}
