variable "project_id" {
  description = "Project that holds the bucket."
  type        = string
}

variable "name" {
  description = "Bucket name (global: every bucket in Google Cloud has its own)."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9_-]{1,61}[a-z0-9]$", var.name)) && !startswith(var.name, "goog")
    error_message = "name must be a valid bucket name: 3 to 63 lower-case letters, digits, hyphens or underscores, starting and ending with a letter or digit, not starting with goog."
  }
}

variable "location" {
  description = "Bucket location: the region of the services that read and write it."
  type        = string
}

variable "retention_days" {
  description = "Days after which an object is deleted, the flows' retention (RELAYFLOW_RETENTION_DAYS): whole days, as the lifecycle rule counts them."
  type        = number

  validation {
    condition     = var.retention_days >= 1 && var.retention_days <= 3650 && floor(var.retention_days) == var.retention_days
    error_message = "retention_days must be a whole number of days from 1 to 3650."
  }
}

variable "kms_key_name" {
  description = "Cloud KMS key that encrypts new objects (CMEK), in the bucket's location, whose Cloud Storage service agent may use it; null: Google-managed encryption."
  type        = string
  default     = null
}

variable "labels" {
  description = "Labels applied to the bucket."
  type        = map(string)
  default     = {}
}
