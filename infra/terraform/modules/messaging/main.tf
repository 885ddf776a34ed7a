# Pub/Sub: the request, result and dead-letter topics; the push subscription that starts flows;
# pull subscriptions that hold results and dead letters. Names and delivery settings come from
# relayflow/topology.json via the caller (DESIGN invariant 10).

locals {
  # Pub/Sub moves dead letters with its own service agent, not with any relayflow identity.
  pubsub_service_agent = "serviceAccount:service-${var.project_number}@gcp-sa-pubsub.iam.gserviceaccount.com"
  topic_ids            = { for t in google_pubsub_topic.main : t.name => t.id }
}

resource "google_pubsub_topic" "main" {
  # checkov:skip=CKV_GCP_83:Google-managed encryption; messages hold flow ids and inputs only, and a CMEK key ring is not part of this deployment.
  for_each = tomap(var.topics)

  project = var.project_id
  name    = each.value
  labels  = var.labels
}

resource "google_pubsub_subscription" "start" {
  project              = var.project_id
  name                 = var.start_subscription.name
  topic                = local.topic_ids[var.start_subscription.topic]
  labels               = var.labels
  ack_deadline_seconds = var.start_subscription.ack_deadline_s

  push_config {
    push_endpoint = var.push_endpoint

    oidc_token {
      service_account_email = var.push_service_account_email
      audience              = var.push_audience
    }
  }

  retry_policy {
    minimum_backoff = "${var.start_subscription.min_backoff_s}s"
    maximum_backoff = "${var.start_subscription.max_backoff_s}s"
  }

  dead_letter_policy {
    dead_letter_topic     = local.topic_ids[var.start_subscription.dead_letter_topic]
    max_delivery_attempts = var.start_subscription.max_delivery_attempts
  }

  # Subscriptions expire after 31 idle days by default; a quiet environment must not lose it.
  expiration_policy {
    ttl = ""
  }
}

resource "google_pubsub_subscription" "hold" {
  for_each = var.hold_subscriptions

  project                    = var.project_id
  name                       = each.value.name
  topic                      = local.topic_ids[each.value.topic]
  labels                     = var.labels
  ack_deadline_seconds       = each.value.ack_deadline_s
  message_retention_duration = "${var.message_retention_s}s"

  expiration_policy {
    ttl = ""
  }
}

# Dead-lettering needs the Pub/Sub service agent to publish to the dead-letter topic and to
# acknowledge on the source subscription.
resource "google_pubsub_topic_iam_member" "dead_letter_publisher" {
  project = var.project_id
  topic   = local.topic_ids[var.start_subscription.dead_letter_topic]
  role    = "roles/pubsub.publisher"
  member  = local.pubsub_service_agent
}

resource "google_pubsub_subscription_iam_member" "dead_letter_subscriber" {
  project      = var.project_id
  subscription = google_pubsub_subscription.start.name
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_service_agent
}
