output "ids" {
  description = "Queue ids (projects/P/locations/L/queues/Q) keyed by role, and role-i for shard i >= 1."
  value       = merge({ for k, q in google_cloud_tasks_queue.main : k => q.id }, { for k, q in google_cloud_tasks_queue.shard : k => q.id })
}

output "names" {
  description = "Queue names keyed by role, and role-i for shard i >= 1."
  value       = merge({ for k, q in google_cloud_tasks_queue.main : k => q.name }, { for k, q in google_cloud_tasks_queue.shard : k => q.name })
}
