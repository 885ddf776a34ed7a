output "name" {
  description = "Service name."
  value       = google_cloud_run_v2_service.main.name
}

output "id" {
  description = "Service resource id."
  value       = google_cloud_run_v2_service.main.id
}

output "uri" {
  description = "Main URI of the service."
  value       = google_cloud_run_v2_service.main.uri
}

output "urls" {
  description = "All URLs serving the service (includes the deterministic SERVICE-PROJECT_NUMBER.REGION.run.app one)."
  value       = google_cloud_run_v2_service.main.urls
}

output "service_account_email" {
  description = "Email of the service's own runtime service account."
  value       = data.google_service_account.main.email
}

output "service_account_member" {
  description = "IAM member string of the service's runtime service account."
  value       = "serviceAccount:${data.google_service_account.main.email}"
}

output "access_grant_ids" {
  description = "Ids of the service's invoker and viewer grants: depend on them before anything calls the service."
  value       = concat([for m in google_cloud_run_v2_service_iam_member.invoker : m.id], [for m in google_cloud_run_v2_service_iam_member.viewer : m.id])
}
