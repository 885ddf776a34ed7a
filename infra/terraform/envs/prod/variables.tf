variable "project_id" {
  description = "Project of the prod environment."
  type        = string
}

variable "region" {
  description = "Region of the Cloud Run services, queues and scheduler job."
  type        = string
  default     = "us-central1"
}

variable "image" {
  description = "relayflow container image, pinned by digest (cloudbuild.yaml passes the one it just pushed)."
  type        = string
}

variable "client_api_url" {
  description = "Base URL of the external client API for prod."
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

variable "api_invoker_members" {
  description = "Principals allowed to call the api service, keyed by a static label."
  type        = map(string)
  default     = {}
}

variable "deletion_protection" {
  description = "Protect the services and the Firestore database against deletion."
  type        = bool
  default     = true
}
