# Applied once per environment, by a person with owner rights on the environment's project,
# before the first build: see docs/deploy.md.
provider "google" {
  project = var.project_id
  region  = var.region

  default_labels = {
    app         = "relayflow"
    environment = var.environment
  }
}

provider "google-beta" {
  project = var.project_id
  region  = var.region

  default_labels = {
    app         = "relayflow"
    environment = var.environment
  }
}

module "bootstrap" {
  source = "../modules/bootstrap"

  project_id            = var.project_id
  environment           = var.environment
  region                = var.region
  state_bucket_name     = var.state_bucket_name
  state_bucket_location = var.state_bucket_location
  repository_id         = var.repository_id
  images_kept           = var.images_kept
  image_max_age_days    = var.image_max_age_days
  image_readers         = var.image_readers
  source_repository     = var.source_repository
  branch                = var.branch
  upstream_repository   = var.upstream_repository
  labels                = var.labels
}
