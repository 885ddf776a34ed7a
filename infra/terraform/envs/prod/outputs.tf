output "service_urls" {
  description = "URL of each Cloud Run service."
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
