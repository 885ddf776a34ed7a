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
    tasks-invoker = google_service_account.tasks_invoker.email
    pubsub-push   = google_service_account.pubsub_push.email
    scheduler     = google_service_account.scheduler.email
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
