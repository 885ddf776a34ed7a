# State lives in this environment's own bucket, created by infra/terraform/bootstrap in the
# environment's project; its name is given at init, never committed (bucket names are global):
#   terraform init -backend-config="bucket=<state bucket>"
terraform {
  backend "gcs" {
    prefix = "relayflow/prod"
  }
}
