output "service_urls" {
  description = "URL of each Cloud Run service (internal ingress: reachable from the project's VPC and Google's push/dispatch services)."
  value = {
    start-flow = module.start_flow.uri
    worker     = module.worker.uri
    poller     = module.poller.uri
    api        = module.api.uri
  }
}

output "service_accounts" {
  description = "Email of each relayflow identity."
  value = {
    start-flow    = module.start_flow.service_account_email
    worker        = module.worker.service_account_email
    poller        = module.poller.service_account_email
    api           = module.api.service_account_email
    tasks-invoker = data.google_service_account.tasks_invoker.email
    pubsub-push   = data.google_service_account.pubsub_push.email
    scheduler     = data.google_service_account.scheduler.email
  }
}

output "topic_ids" {
  description = "Pub/Sub topic ids keyed by role."
  value       = module.messaging.topic_ids
}

output "queue_ids" {
  description = "Cloud Tasks queue ids keyed by role."
  value       = module.queues.ids
}

output "firestore_database" {
  description = "Firestore database name."
  value       = module.firestore.name
}

output "sweep_job" {
  description = "Id of the Cloud Scheduler job that calls POST /sweep."
  value       = google_cloud_scheduler_job.sweep.id
}

output "schedules_job" {
  description = "Id of the Cloud Scheduler job that calls POST /schedules/tick every minute."
  value       = google_cloud_scheduler_job.schedules.id
}

output "project_id" {
  description = "Project of this environment."
  value       = var.project_id
}

output "region" {
  description = "Region of the services, queues and scheduler job."
  value       = var.region
}

output "image" {
  description = "Image every service runs (by digest)."
  value       = var.image
}

output "app" {
  description = "RELAYFLOW_APP every service loads."
  value       = var.app
}

output "subscriptions" {
  description = "Subscription names: the push subscriptions that start flows (start) and deliver signals to the api (signals), and the hold subscriptions (dead_letter, results)."
  value = merge(
    {
      start   = module.messaging.start_subscription_name
      signals = module.messaging.signals_subscription_name
    },
    module.messaging.hold_subscription_names,
  )
}

output "pubsub_service_agent" {
  description = "Email of the project's Pub/Sub service agent (moves dead letters, signs push tokens)."
  value       = google_project_service_identity.pubsub.email
}

output "callback_url" {
  description = "Where external systems complete callback tokens: POST here with the token in the X-Relayflow-Callback-Token header (never in the URL, which logs keep) and an identity token for the api (audience: this URL without /callbacks) as an account in api_completers (or api_operators)."
  value       = "${local.url["api"]}/callbacks"
}

output "api_proxy_command" {
  description = "What a person runs to reach the api and its console on http://localhost:8080: the proxy sends a token minted for the api's URL as SERVICE_ACCOUNT, an account in api_viewers or api_operators the person may impersonate (roles/iam.serviceAccountTokenCreator on it). See infra/terraform/README.md, \"People and the api\"."
  value       = "gcloud run services proxy ${module.api.name} --project ${var.project_id} --region ${var.region} --port 8080 --impersonate-service-account=SERVICE_ACCOUNT --token=\"$(gcloud auth print-identity-token --impersonate-service-account=SERVICE_ACCOUNT --audiences=${local.url["api"]} --include-email)\""
}

output "tenant_topics" {
  description = "Each named tenant's own start topic, keyed by tenant: its producers (tenant_publishers) publish there, as `relayflow publish --tenant TENANT` does; the shared requests topic starts the default tenant's flows only."
  value       = module.messaging.tenant_topic_names

  precondition {
    condition     = alltrue([for tenant in keys(var.tenant_publishers) : contains(keys(local.tenant_requests), tenant)])
    error_message = "Every tenant of tenant_publishers must be named in tenants (tenants = { tenants = { NAME = {} } }): only a named tenant has a topic of its own."
  }
}

output "dashboard_url" {
  description = "Console URL of the relayflow dashboard."
  value       = module.monitoring.dashboard_url
}

output "alert_policy_ids" {
  description = "Alert policy ids keyed by alert."
  value       = module.monitoring.alert_policy_ids
}

output "offload_bucket" {
  description = "The bucket that holds offloaded payloads (RELAYFLOW_OFFLOAD_BUCKET); objects are deleted retention_days after they were written."
  value       = module.offload.name
}

output "cmek_keys" {
  description = "The Cloud KMS key of each store of flow data (firestore, pubsub, tasks, storage) with CMEK on; empty with it off."
  value       = local.cmek ? { for store, key in local.kms_key : store => key } : {}
}

output "tasks_cmek_command" {
  description = "With CMEK on, the gcloud command that makes Cloud Tasks encrypt every task created in the region with the tasks key (a per-location setting the google provider has no resource for); run it once after the apply that created the key. null with CMEK off."
  value       = local.cmek ? "gcloud tasks cmek-config update --project=${var.project_id} --location=${var.region} --kms-key-name=${local.kms_key["tasks"]}" : null
}
