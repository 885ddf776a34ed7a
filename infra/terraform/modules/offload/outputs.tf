output "name" {
  description = "Bucket name (RELAYFLOW_OFFLOAD_BUCKET)."
  value       = google_storage_bucket.main.name
}

output "url" {
  description = "Bucket URL (gs://NAME)."
  value       = google_storage_bucket.main.url
}
