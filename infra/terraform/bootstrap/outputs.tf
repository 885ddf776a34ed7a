output "state_bucket" {
  description = "Terraform state bucket of this environment."
  value       = module.bootstrap.state_bucket
}

output "repository_url" {
  description = "Artifact Registry repository of this environment's images."
  value       = module.bootstrap.repository_url
}

output "build_service_account" {
  description = "The build account (give it to the upstream environment's image_readers)."
  value       = module.bootstrap.build_service_account
}

output "build_roles" {
  description = "Project roles the build account holds."
  value       = module.bootstrap.build_roles
}

output "test_service_account" {
  description = "The account dev's test build runs as (null outside dev)."
  value       = module.bootstrap.test_service_account
}

output "service_accounts" {
  description = "relayflow's identities in this environment, by role."
  value       = module.bootstrap.service_accounts
}

output "triggers" {
  description = "Cloud Build trigger names."
  value       = module.bootstrap.triggers
}

output "tfvars_path" {
  description = "Where to upload envs/<env>/terraform.tfvars for the build."
  value       = module.bootstrap.tfvars_path
}
