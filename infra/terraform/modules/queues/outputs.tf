output "ids" {
  description = "Queue ids (projects/P/locations/L/queues/Q) keyed by role."
  value       = { for k, q in google_cloud_tasks_queue.main : k => q.id }
}

output "names" {
  description = "Queue names keyed by role."
  value       = { for k, q in google_cloud_tasks_queue.main : k => q.name }
}
