output "ids" {
  description = "Key ids (projects/P/locations/L/keyRings/R/cryptoKeys/K) keyed by store."
  value       = { for k, key in google_kms_crypto_key.main : k => key.id }
}

output "key_ring_ids" {
  description = "Key ring ids keyed by location."
  value       = { for location, ring in google_kms_key_ring.main : location => ring.id }
}
