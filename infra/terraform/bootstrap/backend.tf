# The bootstrap creates the bucket its own state ends up in. First apply with local state (a
# backend_override.tf, see docs/deploy.md), then move the state in:
#   terraform init -migrate-state -backend-config="bucket=<state bucket>" \
#     -backend-config="prefix=relayflow/<env>/bootstrap"
terraform {
  backend "gcs" {}
}
