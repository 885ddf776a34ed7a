# Everything an operator needs after an apply, as the module reports it.
output "service_urls" {
  description = "URL of each Cloud Run service (internal ingress: reachable from the project's VPC and Google's push/dispatch services)."
  value       = module.relayflow.service_urls
}

output "service_accounts" {
  description = "Email of each relayflow identity."
  value       = module.relayflow.service_accounts
}

output "topic_ids" {
  description = "Pub/Sub topic ids keyed by role."
  value       = module.relayflow.topic_ids
}

output "queue_ids" {
  description = "Cloud Tasks queue ids keyed by role."
  value       = module.relayflow.queue_ids
}

output "firestore_database" {
  description = "Firestore database name."
  value       = module.relayflow.firestore_database
}

output "sweep_job" {
  description = "Id of the Cloud Scheduler job that calls POST /sweep."
  value       = module.relayflow.sweep_job
}

output "schedules_job" {
  description = "Id of the Cloud Scheduler job that calls POST /schedules/tick every minute."
  value       = module.relayflow.schedules_job
}

output "project_id" {
  description = "Project of this environment."
  value       = module.relayflow.project_id
}

output "region" {
  description = "Region of the services, queues and scheduler job."
  value       = module.relayflow.region
}

output "image" {
  description = "Image every service runs (by digest)."
  value       = module.relayflow.image
}

output "app" {
  description = "RELAYFLOW_APP every service loads."
  value       = module.relayflow.app
}

output "subscriptions" {
  description = "Subscription names: the push subscriptions that start flows (start) and deliver signals to the api (signals), and the hold subscriptions (dead_letter, results)."
  value       = module.relayflow.subscriptions
}

output "pubsub_service_agent" {
  description = "Email of the project's Pub/Sub service agent (moves dead letters, signs push tokens)."
  value       = module.relayflow.pubsub_service_agent
}

output "callback_url" {
  description = "Where external systems POST callback tokens (in the X-Relayflow-Callback-Token header), with an identity token for the api (audience: this URL without /callbacks) as an account in api_completers."
  value       = module.relayflow.callback_url
}

output "api_proxy_command" {
  description = "What a person in api_viewers or api_operators runs to reach the api and its console on http://localhost:8080."
  value       = module.relayflow.api_proxy_command
}

output "dashboard_url" {
  description = "Console URL of the relayflow dashboard."
  value       = module.relayflow.dashboard_url
}

output "alert_policy_ids" {
  description = "Alert policy ids keyed by alert."
  value       = module.relayflow.alert_policy_ids
}

output "tenant_topics" {
  description = "Each named tenant's own start topic, keyed by tenant (its tenant_publishers publish there)."
  value       = module.relayflow.tenant_topics
}

output "offload_bucket" {
  description = "The bucket that holds offloaded payloads (RELAYFLOW_OFFLOAD_BUCKET)."
  value       = module.relayflow.offload_bucket
}

output "cmek_keys" {
  description = "The Cloud KMS key of each store of flow data with CMEK on; empty with it off."
  value       = module.relayflow.cmek_keys
}

output "tasks_cmek_command" {
  description = "With CMEK on, the gcloud command that makes Cloud Tasks encrypt new tasks with the tasks key (run once after the apply that created it)."
  value       = module.relayflow.tasks_cmek_command
}
