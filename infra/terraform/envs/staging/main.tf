locals {
  default_labels = {
    app         = "relayflow"
    environment = "staging"
  }
}

provider "google" {
  project        = var.project_id
  region         = var.region
  default_labels = local.default_labels
}

provider "google-beta" {
  project        = var.project_id
  region         = var.region
  default_labels = local.default_labels
}

module "relayflow" {
  source = "../../modules/relayflow"

  project_id                       = var.project_id
  region                           = var.region
  image                            = var.image
  app                              = var.app
  client_api_url                   = var.client_api_url
  firestore_location               = var.firestore_location
  firestore_point_in_time_recovery = var.firestore_point_in_time_recovery
  deletion_protection              = var.deletion_protection
  max_instances                    = var.max_instances
  min_instances                    = var.min_instances
  concurrency                      = var.concurrency
  sweep_schedule                   = var.sweep_schedule
  tasks_log_sampling_ratio         = var.tasks_log_sampling_ratio
  trace_exporter                   = var.trace_exporter
  metrics_exporter                 = var.metrics_exporter
  labels                           = var.labels
  api_ingress                      = var.api_ingress
  api_viewers                      = var.api_viewers
  api_operators                    = var.api_operators
  api_completers                   = var.api_completers
  api_token_audiences              = var.api_token_audiences
  api_token_max_age_s              = var.api_token_max_age_s
  api_origins                      = var.api_origins
  api_sensitive_readers            = var.api_sensitive_readers
  sensitive_keyset                 = var.sensitive_keyset
  sensitive_key_uri                = var.sensitive_key_uri
  request_publishers               = var.request_publishers
  tenant_publishers                = var.tenant_publishers
  signal_publishers                = var.signal_publishers
  result_subscribers               = var.result_subscribers
  dead_letter_replayers            = var.dead_letter_replayers
  notification_channels            = var.notification_channels
  runbook_url                      = var.runbook_url
  alert_thresholds                 = var.alert_thresholds
  tenants                          = var.tenants
  dependencies                     = var.dependencies
  api_scopes                       = var.api_scopes
  queue_shards                     = var.queue_shards
  analytics                        = var.analytics
  retention_days                   = var.retention_days
  offload_bucket_name              = var.offload_bucket_name
  cmek                             = var.cmek
}
