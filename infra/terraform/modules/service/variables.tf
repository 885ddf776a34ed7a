variable "project_id" {
  description = "Project that holds the service and its service account."
  type        = string
}

variable "location" {
  description = "Cloud Run region, e.g. us-central1."
  type        = string
}

variable "name" {
  description = "Cloud Run service name (also part of its deterministic URL)."
  type        = string

  validation {
    condition     = can(regex("^[a-z]([a-z0-9-]{0,47}[a-z0-9])?$", var.name))
    error_message = "name must be a valid Cloud Run service name: lowercase letters, digits and hyphens, at most 49 characters."
  }
}

variable "description" {
  description = "Human-readable description of the service."
  type        = string
  default     = null
}

variable "service_account_id" {
  description = "account_id of this service's own service account (6-30 characters), which the bootstrap creates (infra/terraform/bootstrap): the service runs as it and nothing else does."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.service_account_id))
    error_message = "service_account_id must be 6-30 characters: lowercase letters, digits and hyphens, starting with a letter."
  }
}

variable "image" {
  description = "Container image, preferably pinned by digest (REGION-docker.pkg.dev/PROJECT/REPO/IMAGE@sha256:...)."
  type        = string
}

variable "env" {
  description = "Plain environment variables for the container (names must match relayflow/settings.py)."
  type        = map(string)
  default     = {}
}

variable "invoker_members" {
  description = "Principals allowed to invoke the service (roles/run.invoker), keyed by a static label, e.g. { tasks = \"serviceAccount:...\" }."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for m in values(var.invoker_members) : !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "invoker_members must not contain allUsers or allAuthenticatedUsers: relayflow services are never public."
  }
}

variable "viewer_members" {
  description = "Principals allowed to read the service's configuration (roles/run.viewer on it), keyed by a static label: the operators who reach it through `gcloud run services proxy`."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for m in values(var.viewer_members) : !contains(["allUsers", "allAuthenticatedUsers"], m)])
    error_message = "viewer_members must not contain allUsers or allAuthenticatedUsers: relayflow services are never public."
  }
}

variable "ingress" {
  description = "Who may reach the service on the network: INGRESS_TRAFFIC_INTERNAL_ONLY (this project's VPC and Google's push and dispatch services), INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER, or INGRESS_TRAFFIC_ALL (anyone may connect; IAM still admits only invoker_members)."
  type        = string
  default     = "INGRESS_TRAFFIC_INTERNAL_ONLY"

  validation {
    condition     = contains(["INGRESS_TRAFFIC_INTERNAL_ONLY", "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER", "INGRESS_TRAFFIC_ALL"], var.ingress)
    error_message = "ingress must be INGRESS_TRAFFIC_INTERNAL_ONLY, INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER or INGRESS_TRAFFIC_ALL."
  }
}

variable "custom_audiences" {
  description = "Extra OIDC audiences the service accepts besides its own URLs (e.g. its deterministic URL, which callers compute before the service exists)."
  type        = list(string)
  default     = []
}

variable "min_instances" {
  description = "Minimum number of instances (0 lets the service scale to zero)."
  type        = number
  default     = 0
}

variable "max_instances" {
  description = "Maximum number of instances; bounds the load the service can put on Firestore and the client API."
  type        = number
  default     = 10
}

variable "max_concurrency" {
  description = "Maximum concurrent requests per instance."
  type        = number
  default     = 80
}

variable "request_timeout_s" {
  description = "Request timeout in seconds (Cloud Run allows up to 3600)."
  type        = number
  default     = 300

  validation {
    condition     = var.request_timeout_s >= 1 && var.request_timeout_s <= 3600
    error_message = "request_timeout_s must be between 1 and 3600."
  }
}

variable "cpu" {
  description = "CPU limit per instance, e.g. \"1\"."
  type        = string
  default     = "1"
}

variable "memory" {
  description = "Memory limit per instance, e.g. \"512Mi\"."
  type        = string
  default     = "512Mi"
}

variable "labels" {
  description = "Labels applied to the service."
  type        = map(string)
  default     = {}
}

variable "deletion_protection" {
  description = "Refuse to destroy the service from Terraform."
  type        = bool
  default     = true
}
