output "table" {
  description = "The table of result events, as project.dataset.table (what queries name)."
  value       = local.table
}

output "subscription_name" {
  description = "Name of the BigQuery subscription on the results topic."
  value       = google_pubsub_subscription.main.name
}

output "dead_letter_subscription_name" {
  description = "Name of the pull subscription that holds the result events the BigQuery subscription gave up on."
  value       = google_pubsub_subscription.dead_letter_hold.name
}
