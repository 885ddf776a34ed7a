provider "google" {
  project = var.project_id
  region  = var.region

  default_labels = {
    app         = "relayflow"
    environment = "prod"
  }
}

module "relayflow" {
  source = "../../modules/relayflow"

  project_id                       = var.project_id
  region                           = var.region
  image                            = var.image
  client_api_url                   = var.client_api_url
  firestore_location               = var.firestore_location
  firestore_point_in_time_recovery = var.firestore_point_in_time_recovery
  api_invoker_members              = var.api_invoker_members
  deletion_protection              = var.deletion_protection
}
