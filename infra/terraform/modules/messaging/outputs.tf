output "topic_ids" {
  description = "Topic ids (projects/P/topics/T) keyed by role (requests, results, dead_letter, signals)."
  value       = { for k, t in google_pubsub_topic.main : k => t.id }
}

output "topic_names" {
  description = "Topic names keyed by role."
  value       = { for k, t in google_pubsub_topic.main : k => t.name }
}

output "start_subscription_id" {
  description = "Id of the push subscription that starts flows."
  value       = google_pubsub_subscription.start.id
}

output "hold_subscription_ids" {
  description = "Ids of the hold (pull) subscriptions keyed by role."
  value       = { for k, s in google_pubsub_subscription.hold : k => s.id }
}

output "hold_subscription_names" {
  description = "Names of the hold (pull) subscriptions keyed by role (dead_letter, results)."
  value       = { for k, s in google_pubsub_subscription.hold : k => s.name }
}

output "start_subscription_name" {
  description = "Name of the push subscription that starts flows."
  value       = google_pubsub_subscription.start.name
}

output "signals_subscription_id" {
  description = "Id of the push subscription that delivers signals to the api."
  value       = google_pubsub_subscription.signals.id
}

output "signals_subscription_name" {
  description = "Name of the push subscription that delivers signals to the api."
  value       = google_pubsub_subscription.signals.name
}

output "tenant_topic_names" {
  description = "Each named tenant's own start topic, keyed by tenant: its publishers publish there."
  value       = { for k, t in google_pubsub_topic.tenant : k => t.name }
}

output "tenant_subscription_names" {
  description = "Each named tenant's start push subscription, keyed by tenant."
  value       = { for k, s in google_pubsub_subscription.tenant : k => s.name }
}
