# Every result event in BigQuery: a dataset, a table whose schema is the result event's
# (result-events.table.json, generated from relayflow/schemas/result-event.v1.json by
# `python -m relayflow.schemas --write`), partitioned by the day each event was published, and
# a BigQuery subscription on the results topic that writes each event's fields into the
# columns of the same names (https://cloud.google.com/pubsub/docs/bigquery). What cannot be
# written goes, after a few tries, to a dead-letter topic of its own and its hold subscription.
# docs/analytics.md has the queries.

locals {
  # The subscription names its table as project.dataset.table.
  table = "${google_bigquery_table.main.project}.${google_bigquery_table.main.dataset_id}.${google_bigquery_table.main.table_id}"
  # The Pub/Sub service agent writes the rows: it must read the table's schema and insert.
  writer_roles = toset(["roles/bigquery.dataEditor", "roles/bigquery.metadataViewer"])
}

resource "google_bigquery_dataset" "main" {
  project                    = var.project_id
  dataset_id                 = var.dataset_id
  location                   = var.location
  description                = "relayflow's result events, one row per event on the results topic (docs/analytics.md)."
  labels                     = var.labels
  delete_contents_on_destroy = false

  # With CMEK on (the relayflow module's cmek), every table of the dataset under this key.
  dynamic "default_encryption_configuration" {
    for_each = var.kms_key_name == null ? [] : [var.kms_key_name]
    content {
      kms_key_name = default_encryption_configuration.value
    }
  }
}

resource "google_bigquery_table" "main" {
  # checkov:skip=CKV_GCP_121:Protection follows the environment's deletion_protection, on in staging and prod and off in dev so that dev can be torn down.
  project     = var.project_id
  dataset_id  = google_bigquery_dataset.main.dataset_id
  table_id    = var.table_id
  description = "One row per result event (relayflow/schemas/result-event.v1.json) and its Pub/Sub metadata."
  labels      = var.labels
  # Columns may be added in place; a column removed or retyped replaces the table, which
  # deletion protection turns into a failed plan instead of lost rows.
  schema              = file("${path.module}/result-events.table.json")
  deletion_protection = var.deletion_protection

  # A day's partition holds the events published that day; a query that filters on
  # publish_time reads only its days, and partitions older than the retention are dropped.
  time_partitioning {
    type          = "DAY"
    field         = "publish_time"
    expiration_ms = var.retention_days * 86400000
  }
  # The queries of docs/analytics.md group by flow and version and filter on status.
  clustering = ["flow", "version", "status"]

  dynamic "encryption_configuration" {
    for_each = var.kms_key_name == null ? [] : [var.kms_key_name]
    content {
      kms_key_name = encryption_configuration.value
    }
  }
}

# The table only, not the dataset or the project.
resource "google_bigquery_table_iam_member" "writer" {
  for_each = local.writer_roles

  project    = var.project_id
  dataset_id = google_bigquery_table.main.dataset_id
  table_id   = google_bigquery_table.main.table_id
  role       = each.value
  member     = var.pubsub_service_agent
}

# Events the subscription gave up on (a row BigQuery refuses) are kept here for inspection.
resource "google_pubsub_topic" "dead_letter" {
  project      = var.project_id
  name         = var.dead_letter.topic
  labels       = var.labels
  kms_key_name = var.topic_kms_key_name
}

resource "google_pubsub_subscription" "dead_letter_hold" {
  project                    = var.project_id
  name                       = var.dead_letter.name
  topic                      = google_pubsub_topic.dead_letter.id
  labels                     = var.labels
  ack_deadline_seconds       = var.dead_letter.ack_deadline_s
  message_retention_duration = "${var.message_retention_s}s"

  expiration_policy {
    ttl = ""
  }
}

resource "google_pubsub_subscription" "main" {
  project = var.project_id
  name    = var.subscription.name
  topic   = var.results_topic_id
  labels  = var.labels

  bigquery_config {
    table = local.table
    # Each field of the event into the column of its name, and the message's id, publish
    # time and attributes beside them.
    use_table_schema = true
    write_metadata   = true
    # A field the table does not have yet (an event from a release whose table change is
    # still being applied) is left out rather than the whole event refused.
    drop_unknown_fields = true
  }

  retry_policy {
    minimum_backoff = "${var.subscription.min_backoff_s}s"
    maximum_backoff = "${var.subscription.max_backoff_s}s"
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.dead_letter.id
    max_delivery_attempts = var.subscription.max_delivery_attempts
  }

  expiration_policy {
    ttl = ""
  }

  # Pub/Sub checks at creation that its agent may write the table, and writes as soon as the
  # subscription exists: the grants come first. So does the dead-letter hold, or the first
  # events given up on would be published to a topic nobody reads, and lost.
  depends_on = [
    google_bigquery_table_iam_member.writer,
    google_pubsub_subscription.dead_letter_hold,
    google_pubsub_topic_iam_member.dead_letter_publisher,
  ]

  lifecycle {
    precondition {
      condition     = var.subscription.dead_letter_topic == var.dead_letter.topic
      error_message = "The analytics subscription must dead-letter to the analytics dead-letter topic, whose hold keeps what it gives up."
    }
  }
}

# Dead-lettering: the agent publishes what it gives up and acknowledges it on the subscription.
resource "google_pubsub_topic_iam_member" "dead_letter_publisher" {
  project = var.project_id
  topic   = google_pubsub_topic.dead_letter.name
  role    = "roles/pubsub.publisher"
  member  = var.pubsub_service_agent
}

resource "google_pubsub_subscription_iam_member" "dead_letter_subscriber" {
  project      = var.project_id
  subscription = google_pubsub_subscription.main.name
  role         = "roles/pubsub.subscriber"
  member       = var.pubsub_service_agent
}
