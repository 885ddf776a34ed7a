variable "project_id" {
  description = "Project that holds the database."
  type        = string
}

variable "database_id" {
  description = "Database id. relayflow's clients use the default database."
  type        = string
  default     = "(default)"
}

variable "location_id" {
  description = "Firestore location: a multi-region (nam5, eur3) or a region (us-central1). Cannot change after creation."
  type        = string
}

variable "composite_indexes" {
  description = "Composite indexes keyed by a static label: the collection and its ordered fields (order ASCENDING or DESCENDING)."
  type = map(object({
    collection = string
    fields = list(object({
      field_path = string
      order      = string
    }))
  }))
  default = {}

  validation {
    condition = alltrue(flatten([
      for i in values(var.composite_indexes) : [for f in i.fields : contains(["ASCENDING", "DESCENDING"], f.order)]
    ]))
    error_message = "Each index field's order must be ASCENDING or DESCENDING."
  }
}

variable "ttl_collections" {
  description = "Collections whose documents expire at `ttl_field`: history (flows, their lanes, rejected messages), never live state."
  type        = list(string)
}

variable "ttl_field" {
  description = "Timestamp field that drives TTL deletion."
  type        = string
  default     = "expire_at"
}

variable "unindexed_fields" {
  description = "Fields whose single-field indexes are switched off, by collection: large maps and lists that no query filters or orders on (each map key and list element is an index entry, at most 40,000 per document)."
  type        = map(list(string))
  default     = {}
}

variable "point_in_time_recovery" {
  description = "Keep 7 days of point-in-time recovery."
  type        = bool
  default     = false
}

variable "deletion_protection" {
  description = "Refuse to delete the database (also through the console or gcloud)."
  type        = bool
  default     = true
}

variable "kms_key_name" {
  description = "Cloud KMS key that encrypts the database (CMEK), in the database's location (nam5: the us multi-region, eur3: europe), whose Firestore service agent may use it; null: Google-managed encryption. Only a database being created takes it: an existing database keeps its encryption."
  type        = string
  default     = null
}
