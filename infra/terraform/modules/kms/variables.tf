variable "project_id" {
  description = "Project that holds the key rings and keys."
  type        = string
}

variable "key_ring" {
  description = "Name of the key ring in each location (key ring names are unique per location; a key ring can never be deleted, so its name can never be reused)."
  type        = string
  default     = "relayflow"
}

variable "keys" {
  description = "The keys to create, keyed by the store each protects (its key name), with the Cloud KMS location of that store's data, e.g. { pubsub = { location = \"us-central1\" }, firestore = { location = \"us\" } }."
  type = map(object({
    location = string
  }))

  validation {
    condition     = alltrue([for name in keys(var.keys) : can(regex("^[a-zA-Z0-9_-]{1,63}$", name))])
    error_message = "Key names are 1 to 63 letters, digits, underscores or hyphens."
  }
}

variable "rotation_period" {
  description = "How often each key gets a new primary version, in seconds with an s suffix, from 86400s (a day, Cloud KMS's minimum) to 7776000s (90 days)."
  type        = string
  default     = "7776000s"

  validation {
    condition     = can(regex("^[0-9]+s$", var.rotation_period)) && try(tonumber(trimsuffix(var.rotation_period, "s")) >= 86400 && tonumber(trimsuffix(var.rotation_period, "s")) <= 7776000, false)
    error_message = "rotation_period must be from 86400s (1 day) to 7776000s (90 days), in seconds with an s suffix."
  }
}

variable "labels" {
  description = "Labels applied to the keys."
  type        = map(string)
  default     = {}
}
