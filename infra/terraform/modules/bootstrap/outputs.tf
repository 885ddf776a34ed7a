output "state_bucket" {
  description = "Terraform state bucket: terraform init -backend-config=\"bucket=...\" in envs/<env>."
  value       = google_storage_bucket.main.name
}

output "repository_url" {
  description = "Where this environment's images live (REGION-docker.pkg.dev/PROJECT/REPO)."
  value       = local.repository_url
}

output "build_service_account" {
  description = "Email of the build account; list it in the upstream environment's image_readers."
  value       = google_service_account.build.email
}

output "build_roles" {
  description = "Project roles the build account holds (over relayflow's service accounts it holds roles on each account alone)."
  value       = sort(keys(local.build_roles))
}

output "test_service_account" {
  description = "Email of the account the tests run as (dev only; null elsewhere): it may write its build logs, nothing else."
  value       = one(google_service_account.test[*].email)
}

output "service_accounts" {
  description = "relayflow's identities in this environment (start-flow, worker, poller, api, tasks-invoker, pubsub-push, scheduler): their emails; envs/<env> reads them by account id."
  value       = { for k, a in google_service_account.relayflow : k => a.email }
}

output "triggers" {
  description = "Cloud Build trigger names keyed by role (build, promote, plan, apply)."
  value       = { for k, t in google_cloudbuild_trigger.main : k => t.name }
}

output "tfvars_path" {
  description = "Where the build reads this environment's terraform.tfvars."
  value       = "gs://${google_storage_bucket.main.name}/relayflow/${var.environment}/terraform.tfvars"
}

output "environment_marker" {
  description = "Object every build reads to check that its _ENV and project belong together."
  value       = "gs://${google_storage_bucket.main.name}/${google_storage_bucket_object.environment.name}"
}
