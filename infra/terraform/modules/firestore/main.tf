# The Firestore (native mode) database, the composite index the sweeper's query needs, and TTL
# policies. The emulator has neither indexes nor TTL, so these exist only here (GCP_NOTES).

resource "google_firestore_database" "main" {
  project     = var.project_id
  name        = var.database_id
  location_id = var.location_id
  type        = "FIRESTORE_NATIVE"

  point_in_time_recovery_enablement = var.point_in_time_recovery ? "POINT_IN_TIME_RECOVERY_ENABLED" : "POINT_IN_TIME_RECOVERY_DISABLED"
  delete_protection_state           = var.deletion_protection ? "DELETE_PROTECTION_ENABLED" : "DELETE_PROTECTION_DISABLED"
  # Destroying the Terraform resource must never delete the flows.
  deletion_policy = "ABANDON"
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
