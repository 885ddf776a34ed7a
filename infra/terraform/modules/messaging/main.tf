# Pub/Sub: the request, result, signal and dead-letter topics; each named tenant's own start
# topic; the push subscriptions that start flows (to start-flow) and deliver signals (to the
# api's /signals); pull subscriptions that hold results and dead letters. Names and delivery
# settings come from relayflow/topology.json via the caller (DESIGN invariant 10).

locals {
  topic_ids = { for t in google_pubsub_topic.main : t.name => t.id }

  # Every start subscription pushes to a path naming its topic (projects/P/topics/T):
  # functions-framework sets the CloudEvent's source from it, and the start function takes the
  # tenant from the topic (a tenant's own topic is that tenant's; the shared one the default's).
  push_path = "${var.push_url}/projects/${var.project_id}/topics"

  # Where a dead letter is replayed: back to the topic it came from (its
  # CloudPubSubDeadLetterSourceSubscription names the subscription, and so the topic).
  replay_topics = merge(
    {
      requests = google_pubsub_topic.main["requests"].name
      signals  = google_pubsub_topic.main["signals"].name
    },
    { for tenant, topic in google_pubsub_topic.tenant : "tenant/${tenant}" => topic.name },
  )

  # tenant_publishers flattened: "tenant/label" => { tenant, member }.
  tenant_publisher_grants = merge({}, [
    for tenant, members in var.tenant_publishers : {
      for label, member in members : "${tenant}/${label}" => { tenant = tenant, member = member }
    }
  ]...)
  # The human replayers on each tenant's topic: "label/tenant" => { member, topic }.
  tenant_replay_grants = {
    for pair in setproduct(keys(var.dead_letter_replayers), keys(var.tenant_requests)) :
    "${pair[0]}/${pair[1]}" => { member = var.dead_letter_replayers[pair[0]], tenant = pair[1] }
  }
}

# Messages carry flow inputs, results and signals: with CMEK on they are encrypted with the
# environment's Pub/Sub key. Attributes are not (https://cloud.google.com/pubsub/docs/encryption):
# relayflow's carry ids, the flow type, the tenant, a status and trace context, never inputs or
# outputs. A topic's key can be changed in place; messages published before keep theirs.
resource "google_pubsub_topic" "main" {
  for_each = tomap(var.topics)

  project      = var.project_id
  name         = each.value
  labels       = var.labels
  kms_key_name = var.kms_key_name
}

resource "google_pubsub_subscription" "start" {
  project              = var.project_id
  name                 = var.start_subscription.name
  topic                = local.topic_ids[var.start_subscription.topic]
  labels               = var.labels
  ack_deadline_seconds = var.start_subscription.ack_deadline_s

  push_config {
    push_endpoint = "${local.push_path}/${var.start_subscription.topic}"

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

# --- Each named tenant's own start topic --------------------------------------------------------

# Publishers are bound to tenants: IAM on a tenant's topic says who may start its flows, and the
# start function takes the tenant from the topic a message came by (the shared requests topic
# starts the default tenant's flows only).
resource "google_pubsub_topic" "tenant" {
  for_each = var.tenant_requests

  project      = var.project_id
  name         = each.value.topic
  labels       = merge(var.labels, { relayflow-tenant = each.key })
  kms_key_name = var.kms_key_name
}

# The same delivery as the shared start subscription, to the same function; only the push path
# differs: it names the tenant's topic.
resource "google_pubsub_subscription" "tenant" {
  for_each = var.tenant_requests

  project              = var.project_id
  name                 = each.value.subscription
  topic                = google_pubsub_topic.tenant[each.key].id
  labels               = merge(var.labels, { relayflow-tenant = each.key })
  ack_deadline_seconds = var.start_subscription.ack_deadline_s

  push_config {
    push_endpoint = "${local.push_path}/${each.value.topic}"

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

  expiration_policy {
    ttl = ""
  }

  # As the shared start subscription: start-flow must accept a message before the first one.
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
  # everything Engine.complete writes to must exist before the first signal is pushed; so must
  # the api's own grants here, as every grant of a receiver's identity.
  depends_on = [
    var.signals_push_after,
    google_pubsub_subscription_iam_member.api_dead_letter_reader,
    google_pubsub_topic_iam_member.api_dead_letter_replayer,
  ]

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

resource "google_pubsub_subscription_iam_member" "tenant_dead_letter_subscriber" {
  for_each = google_pubsub_subscription.tenant

  project      = var.project_id
  subscription = each.value.name
  role         = "roles/pubsub.subscriber"
  member       = var.pubsub_service_agent
}

# --- Producers and consumers outside relayflow ------------------------------------------------

# Whoever starts the default tenant's flows publishes on the requests topic, nothing more.
resource "google_pubsub_topic_iam_member" "request_publisher" {
  for_each = var.request_publishers

  project = var.project_id
  topic   = google_pubsub_topic.main["requests"].name
  role    = "roles/pubsub.publisher"
  member  = each.value
}

# Whoever starts a named tenant's flows publishes on that tenant's topic, nothing more.
resource "google_pubsub_topic_iam_member" "tenant_publisher" {
  for_each = local.tenant_publisher_grants

  project = var.project_id
  topic   = lookup({ for t, topic in google_pubsub_topic.tenant : t => topic.name }, each.value.tenant, "")
  role    = "roles/pubsub.publisher"
  member  = each.value.member

  lifecycle {
    precondition {
      condition     = contains(keys(var.tenant_requests), each.value.tenant)
      error_message = "tenant_publishers names tenant \"${each.value.tenant}\", which has no topic of its own: name it in tenants (tenants = { tenants = { ${each.value.tenant} = {} } })."
    }
  }
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
# where it came from: the requests topic, a tenant's own topic, or the signals topic for a signal
# (its CloudPubSubDeadLetterSourceSubscription attribute names the source subscription).
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

resource "google_pubsub_topic_iam_member" "dead_letter_tenant_replayer" {
  for_each = local.tenant_replay_grants

  project = var.project_id
  topic   = google_pubsub_topic.tenant[each.value.tenant].name
  role    = "roles/pubsub.publisher"
  member  = each.value.member
}

# --- The api's own dead-letter access -----------------------------------------------------------

# The console's and the CLI's dead-letter pages go through the api (relayflow.gcp.dead_letters):
# listing pulls from the hold subscription and releases at once (modifyAckDeadline 0), a replay
# publishes the message back where it came from, then acknowledges it. Subscriber on the hold
# subscription only, publisher on the topics a dead letter can come from only.
resource "google_pubsub_subscription_iam_member" "api_dead_letter_reader" {
  project      = var.project_id
  subscription = google_pubsub_subscription.hold["dead_letter"].name
  role         = "roles/pubsub.subscriber"
  member       = var.api_member
}

resource "google_pubsub_topic_iam_member" "api_dead_letter_replayer" {
  for_each = local.replay_topics

  project = var.project_id
  topic   = each.value
  role    = "roles/pubsub.publisher"
  member  = var.api_member
}
