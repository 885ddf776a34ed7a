# State lives in a GCS bucket created once, outside Terraform (see ../../README.md). The bucket
# may be shared; the prefix keeps each environment's state apart.
# Another bucket: terraform init -backend-config="bucket=NAME".
terraform {
  backend "gcs" {
    bucket = "relayflow-tfstate"
    prefix = "relayflow/dev"
  }
}
