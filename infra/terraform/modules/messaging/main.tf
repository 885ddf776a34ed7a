# Pub/Sub: the request, result, signal and dead-letter topics; the push subscriptions that start
# flows (to start-flow) and deliver signals (to the api's /signals); pull subscriptions that hold
# results and dead letters. Names and delivery settings come from relayflow/topology.json via the
# caller (DESIGN invariant 10).

locals {
  topic_ids = { for t in google_pubsub_topic.main : t.name => t.id }
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

  # The subscription delivers as soon as it exists. Whatever the endpoint needs to accept a
  # message (its invoker grant, the Firestore database and indexes, the queues and the grants
  # on them) must exist first, or early messages are refused and dead-lettered while IAM
  # propagates. The caller lists those ids.
  depends_on = [var.push_after]
}

# Signals complete callback tokens ({"token", "output" | "error"}); the api's POST /signals
# answers 2xx for anything it has judged (refusals included) and 5xx only for what may succeed
# later, so what reaches the dead-letter topic failed for want of the api, Firestore or IAM.
resource "google_pubsub_subscription" "signals" {
  project              = var.project_id
  name                 = var.signals_subscription.name
  topic                = local.topic_ids[var.signals_subscription.topic]
  labels               = var.labels
  ack_deadline_seconds = var.signals_subscription.ack_deadline_s

  push_config {
    push_endpoint = var.signals_push_endpoint

    oidc_token {
      service_account_email = var.push_service_account_email
      audience              = var.signals_push_audience
    }
  }

  retry_policy {
    minimum_backoff = "${var.signals_subscription.min_backoff_s}s"
    maximum_backoff = "${var.signals_subscription.max_backoff_s}s"
  }

  dead_letter_policy {
    dead_letter_topic     = local.topic_ids[var.signals_subscription.dead_letter_topic]
    max_delivery_attempts = var.signals_subscription.max_delivery_attempts
  }

  expiration_policy {
    ttl = ""
  }

  # As for the start subscription: the api, its invoker grant for the push account and
  # everything Engine.complete writes to must exist before the first signal is pushed.
  depends_on = [var.signals_push_after]

  lifecycle {
    # One dead-letter topic: the publisher grant below, the hold subscription, its alert and the
    # replay in docs/runbook.md all serve the start subscription's.
    precondition {
      condition     = var.signals_subscription.dead_letter_topic == var.start_subscription.dead_letter_topic
      error_message = "The signals subscription must dead-letter to the start subscription's dead-letter topic."
    }
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

# Dead-lettering needs the Pub/Sub service agent (made to exist by the caller, with
# google_project_service_identity) to publish to the dead-letter topic and to acknowledge on each
# source subscription (start and signals share the dead-letter topic).
resource "google_pubsub_topic_iam_member" "dead_letter_publisher" {
  project = var.project_id
  topic   = local.topic_ids[var.start_subscription.dead_letter_topic]
  role    = "roles/pubsub.publisher"
  member  = var.pubsub_service_agent
}

resource "google_pubsub_subscription_iam_member" "dead_letter_subscriber" {
  project      = var.project_id
  subscription = google_pubsub_subscription.start.name
  role         = "roles/pubsub.subscriber"
  member       = var.pubsub_service_agent
}

resource "google_pubsub_subscription_iam_member" "signals_dead_letter_subscriber" {
  project      = var.project_id
  subscription = google_pubsub_subscription.signals.name
  role         = "roles/pubsub.subscriber"
  member       = var.pubsub_service_agent
}

# --- Producers and consumers outside relayflow ------------------------------------------------

# Whoever starts flows publishes on the requests topic, nothing more.
resource "google_pubsub_topic_iam_member" "request_publisher" {
  for_each = var.request_publishers

  project = var.project_id
  topic   = google_pubsub_topic.main["requests"].name
  role    = "roles/pubsub.publisher"
  member  = each.value
}

# External systems that complete callback tokens publish on the signals topic, nothing more.
resource "google_pubsub_topic_iam_member" "signal_publisher" {
  for_each = var.signal_publishers

  project = var.project_id
  topic   = google_pubsub_topic.main["signals"].name
  role    = "roles/pubsub.publisher"
  member  = each.value
}

# Consumers of results attach subscriptions of their own to the results topic (subscriber on
# the topic grants pubsub.topics.attachSubscription); the hold subscription stays relayflow's.
resource "google_pubsub_topic_iam_member" "result_subscriber" {
  for_each = var.result_subscribers

  project = var.project_id
  topic   = google_pubsub_topic.main["results"].name
  role    = "roles/pubsub.subscriber"
  member  = each.value
}

# Operators who replay dead letters read them from the hold subscription and publish each back
# where it came from: the requests topic, or the signals topic for a signal (its
# CloudPubSubDeadLetterSourceSubscription attribute names the signals subscription).
resource "google_pubsub_subscription_iam_member" "dead_letter_reader" {
  for_each = var.dead_letter_replayers

  project      = var.project_id
  subscription = google_pubsub_subscription.hold["dead_letter"].name
  role         = "roles/pubsub.subscriber"
  member       = each.value
}

resource "google_pubsub_topic_iam_member" "dead_letter_replayer" {
  for_each = var.dead_letter_replayers

  project = var.project_id
  topic   = google_pubsub_topic.main["requests"].name
  role    = "roles/pubsub.publisher"
  member  = each.value
}

resource "google_pubsub_topic_iam_member" "dead_letter_signal_replayer" {
  for_each = var.dead_letter_replayers

  project = var.project_id
  topic   = google_pubsub_topic.main["signals"].name
  role    = "roles/pubsub.publisher"
  member  = each.value
}
