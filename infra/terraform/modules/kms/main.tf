# Customer-managed encryption keys (CMEK): one Cloud KMS key per store of flow data, each in the
# location of the data it protects (a key must be where its data is), in a key ring per location.
#
# One key per store, not one for all: a key is usable only by the service agent it is granted
# to, so the Pub/Sub agent cannot decrypt Firestore's data; disabling one key stops one store;
# Cloud KMS's audit logs name the store by its key; and the stores' locations differ anyway
# (Firestore's nam5 takes a key in the `us` multi-region, the queues one in their region).
#
# Key rings and keys cannot be deleted from a project, and destroying a key's versions makes
# everything it encrypted unreadable for good: Terraform refuses to destroy a key
# (prevent_destroy), so turning CMEK off is a decision made outside Terraform
# (infra/terraform/README.md, "Customer-managed encryption keys").

locals {
  locations = toset([for key in values(var.keys) : key.location])
}

resource "google_kms_key_ring" "main" {
  for_each = local.locations

  project  = var.project_id
  name     = var.key_ring
  location = each.value
}

resource "google_kms_crypto_key" "main" {
  for_each = var.keys

  name     = each.key
  key_ring = google_kms_key_ring.main[each.value.location].id
  purpose  = "ENCRYPT_DECRYPT"
  # A new primary version every rotation_period: new data is encrypted with it, older versions
  # stay enabled to decrypt what they encrypted (https://cloud.google.com/kms/docs/key-rotation).
  rotation_period = var.rotation_period
  labels          = var.labels

  lifecycle {
    prevent_destroy = true
  }
}
