variable "project_id" {
  description = "Project of the environment being bootstrapped."
  type        = string
}

variable "environment" {
  description = "dev, staging or prod."
  type        = string
}

variable "region" {
  description = "Region of the image repository and the build triggers."
  type        = string
  default     = "us-central1"
}

variable "state_bucket_name" {
  description = "Globally unique name of the environment's Terraform state bucket, e.g. <project>-tfstate."
  type        = string
}

variable "state_bucket_location" {
  description = "Location of the state bucket."
  type        = string
  default     = "US"
}

variable "repository_id" {
  description = "Artifact Registry repository id."
  type        = string
  default     = "relayflow"
}

variable "images_kept" {
  description = "Most recent image versions always kept."
  type        = number
  default     = 30
}

variable "image_max_age_days" {
  description = "Older image versions beyond the kept ones are deleted after this many days."
  type        = number
  default     = 90
}

variable "image_readers" {
  description = "Build accounts of the environments promoting from this one (serviceAccount:...), keyed by a static label."
  type        = map(string)
  default     = {}
}

variable "source_repository" {
  description = "Cloud Build 2nd-gen repository: projects/P/locations/R/connections/C/repositories/N."
  type        = string
}

variable "branch" {
  description = "Branch (anchored regular expression) the triggers build."
  type        = string
  default     = "^main$"
}

variable "upstream_repository" {
  description = "Repository this environment promotes from (REGION-docker.pkg.dev/PROJECT/REPO); empty for dev."
  type        = string
  default     = ""
}

variable "labels" {
  description = "Labels on the bucket and the repository."
  type        = map(string)
  default     = {}
}
