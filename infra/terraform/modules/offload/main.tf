# The bucket that holds offloaded payloads: flow inputs, step outputs and results too large for a
# flow document are written here as objects named by their content hash, and the document keeps
# a reference. Objects are written once (the writers may create objects, not replace or delete
# them) and deleted by the bucket's lifecycle retention_days after they were written, the same
# retention as the flow documents' TTL (RELAYFLOW_RETENTION_DAYS).

resource "google_storage_bucket" "main" {
  # checkov:skip=CKV_GCP_78:Versioning is off on purpose: objects are write-once and named by their content, and a kept noncurrent version would outlive the retention the lifecycle rule enforces.
  # checkov:skip=CKV_GCP_62:Access logs would go to another bucket that needs the same care; Cloud Audit Logs (data access) record who read or wrote payloads.
  project  = var.project_id
  name     = var.name
  location = var.location
  labels   = var.labels

  storage_class               = "STANDARD"
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  # A payload is the only copy of what a flow document points to: never delete the bucket with
  # objects in it (the lifecycle empties it within retention_days once nothing writes).
  force_destroy = false

  versioning {
    enabled = false
  }

  # A payload lives as long as the flow documents that point to it: Firestore's TTL deletes a
  # document retention_days after its flow ended, this rule an object retention_days after it
  # was written (age counts whole days from the object's creation:
  # https://cloud.google.com/storage/docs/lifecycle#age).
  lifecycle_rule {
    condition {
      age = var.retention_days
    }
    action {
      type = "Delete"
    }
  }

  # Soft delete would keep each deleted payload, restorable and billed, for 7 more days by
  # default (https://cloud.google.com/storage/docs/soft-delete): a payload must be gone when its
  # retention ends.
  soft_delete_policy {
    retention_duration_seconds = 0
  }

  # With CMEK on (infra/terraform/README.md, "Customer-managed encryption keys"), new objects
  # are encrypted with the environment's storage key; the key must be in the bucket's location.
  dynamic "encryption" {
    for_each = var.kms_key_name == null ? [] : [var.kms_key_name]
    content {
      default_kms_key_name = encryption.value
    }
  }
}
