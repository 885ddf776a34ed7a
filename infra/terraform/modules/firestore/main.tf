# The Firestore (native mode) database, the composite indexes relayflow's queries need, TTL
# policies and single-field index exemptions. The emulator has neither indexes nor TTL, so these
# exist only here (GCP_NOTES).

locals {
  # One google_firestore_field per (collection, field); keys are static so for_each plans.
  unindexed = merge([
    for collection, fields in var.unindexed_fields : {
      for field in fields : "${collection}/${field}" => { collection = collection, field = field }
    }
  ]...)
}

resource "google_firestore_database" "main" {
  project     = var.project_id
  name        = var.database_id
  location_id = var.location_id
  type        = "FIRESTORE_NATIVE"

  point_in_time_recovery_enablement = var.point_in_time_recovery ? "POINT_IN_TIME_RECOVERY_ENABLED" : "POINT_IN_TIME_RECOVERY_DISABLED"
  delete_protection_state           = var.deletion_protection ? "DELETE_PROTECTION_ENABLED" : "DELETE_PROTECTION_DISABLED"
  # Destroying the Terraform resource must never delete the flows.
  deletion_policy = "ABANDON"

  # CMEK (infra/terraform/README.md, "Customer-managed encryption keys"): a database's key is
  # chosen when it is created and can never be added, changed or removed
  # (https://cloud.google.com/firestore/docs/cmek). The provider would replace the database to
  # change it, so a change is ignored here and reported by the check below instead.
  dynamic "cmek_config" {
    for_each = var.kms_key_name == null ? [] : [var.kms_key_name]
    content {
      kms_key_name = cmek_config.value
    }
  }

  lifecycle {
    ignore_changes = [cmek_config]
  }
}

# Warns, at every plan and apply, when the database is not encrypted as asked: CMEK turned on (or
# off) for an environment whose database already exists.
check "cmek" {
  assert {
    condition     = try(google_firestore_database.main.cmek_config[0].kms_key_name, null) == var.kms_key_name
    error_message = "The Firestore database is not encrypted with the key this environment names (kms_key_name): a database's CMEK is fixed when it is created. See infra/terraform/README.md, \"Customer-managed encryption keys\", for moving the data to a database created with the key."
  }
}

# Composite indexes for relayflow's queries; the emulator runs them without indexes, the cloud
# refuses them without these.
resource "google_firestore_index" "composite" {
  for_each = var.composite_indexes

  project     = var.project_id
  database    = google_firestore_database.main.name
  collection  = each.value.collection
  query_scope = "COLLECTION"

  dynamic "fields" {
    for_each = each.value.fields
    content {
      field_path = fields.value.field_path
      order      = fields.value.order
    }
  }
}

# TTL deletes a document some time (typically within 24 h) after its `ttl_field` passes. The
# field's single-field indexes are switched off (empty index_config): nothing queries on it and
# an indexed, monotonically increasing timestamp creates write hotspots.
resource "google_firestore_field" "ttl" {
  for_each = toset(var.ttl_collections)

  project    = var.project_id
  database   = google_firestore_database.main.name
  collection = each.value
  field      = var.ttl_field

  ttl_config {}
  index_config {}
}

# Firestore indexes every field of every document by default, each map key and list element
# included, and a document may have at most 40,000 index entries: a valid 256 KiB `outputs` of
# many small keys would make the flow unwritable. Nothing queries these fields, so their
# single-field indexes are switched off (empty index_config); the queried fields (status,
# updated_at, next_run_at, finished_at, result_published, flow, ...) keep theirs.
resource "google_firestore_field" "unindexed" {
  for_each = local.unindexed

  project    = var.project_id
  database   = google_firestore_database.main.name
  collection = each.value.collection
  field      = each.value.field

  index_config {}

  lifecycle {
    # Two google_firestore_field resources on one field would fight over its settings.
    precondition {
      condition     = each.value.field != var.ttl_field
      error_message = "The TTL field already has its indexes switched off by google_firestore_field.ttl."
    }
  }
}
