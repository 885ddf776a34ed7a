variable "project_id" {
  description = "Project of the environment (one environment per project)."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9-]{4,28}[a-z0-9]$", var.project_id))
    error_message = "project_id must be a valid Google Cloud project id."
  }
}

variable "environment" {
  description = "Which environment this project holds: dev, staging or prod."
  type        = string

  validation {
    condition     = contains(["dev", "staging", "prod"], var.environment)
    error_message = "environment must be dev, staging or prod."
  }
}

variable "region" {
  description = "Region of the Artifact Registry repository and the Cloud Build triggers."
  type        = string
}

variable "state_bucket_name" {
  description = "Name of the Terraform state bucket (globally unique), e.g. <project>-tfstate."
  type        = string

  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9._-]{1,61}[a-z0-9]$", var.state_bucket_name))
    error_message = "state_bucket_name must be a valid bucket name (3-63 lowercase letters, digits, dots, dashes, underscores)."
  }
}

variable "state_bucket_location" {
  description = "Location of the state bucket (a region or multi-region)."
  type        = string
  default     = "US"
}

variable "state_versions_kept" {
  description = "Old versions of each state object kept (for rollback)."
  type        = number
  default     = 50
}

variable "repository_id" {
  description = "Artifact Registry repository id (the build substitution _REPOSITORY)."
  type        = string
  default     = "relayflow"
}

variable "images_kept" {
  description = "Most recent image versions the cleanup policy always keeps."
  type        = number
  default     = 30
}

variable "image_max_age_days" {
  description = "Image versions older than this many days (and not among the most recent kept) are deleted."
  type        = number
  default     = 90
}

variable "image_readers" {
  description = "The build accounts of the environments that promote from this one (staging's for dev, prod's for staging), keyed by a static label: they read this repository and its provenance."
  type        = map(string)
  default     = {}

  validation {
    condition     = alltrue([for m in values(var.image_readers) : startswith(m, "serviceAccount:")])
    error_message = "image_readers are build service accounts: serviceAccount:EMAIL."
  }
}

variable "source_repository" {
  description = "Cloud Build (2nd gen) repository the triggers build, projects/P/locations/R/connections/C/repositories/N; connect it once in the console or with gcloud builds connections create github."
  type        = string

  validation {
    condition     = can(regex("^projects/[^/]+/locations/[^/]+/connections/[^/]+/repositories/[^/]+$", var.source_repository))
    error_message = "source_repository must be projects/P/locations/R/connections/C/repositories/N."
  }
}

variable "branch" {
  description = "Branch (regular expression, anchored) that dev builds on push and staging/prod take their config from."
  type        = string
  default     = "^main$"
}

variable "upstream_repository" {
  description = "Artifact Registry repository of the environment this one promotes from (staging: dev's, prod: staging's), REGION-docker.pkg.dev/PROJECT/REPO; empty for dev."
  type        = string
  default     = ""
}

variable "labels" {
  description = "Labels applied to the bucket and the repository."
  type        = map(string)
  default     = {}
}
