output "name" {
  description = "Database name, e.g. (default)."
  value       = google_firestore_database.main.name
}

output "id" {
  description = "Database id (projects/P/databases/D)."
  value       = google_firestore_database.main.id
}

output "ttl_fields" {
  description = "TTL field ids keyed by collection."
  value       = { for k, f in google_firestore_field.ttl : k => f.id }
}

output "index_ids" {
  description = "Composite index ids keyed by label."
  value       = { for k, i in google_firestore_index.composite : k => i.id }
}

output "unindexed_field_ids" {
  description = "Ids of the single-field index exemptions keyed by collection/field."
  value       = { for k, f in google_firestore_field.unindexed : k => f.id }
}

output "resource_ids" {
  description = "Ids of everything this module creates (database, indexes, field settings): depend on it before sending the database any traffic."
  value = concat(
    [google_firestore_database.main.id],
    [for i in google_firestore_index.composite : i.id],
    [for f in google_firestore_field.ttl : f.id],
    [for f in google_firestore_field.unindexed : f.id],
  )
}

output "kms_key_name" {
  description = "The Cloud KMS key the database is encrypted with (CMEK), null if Google-managed."
  value       = try(google_firestore_database.main.cmek_config[0].kms_key_name, null)
}
