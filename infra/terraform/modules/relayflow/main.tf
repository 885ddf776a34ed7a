# relayflow on one project: messaging, queues, Firestore, four Cloud Run services, the scheduler
# that runs the sweeper, alerts and a dashboard, and what each component's least-privilege
# service account may do. The accounts themselves are the bootstrap's (infra/terraform/bootstrap),
# so that the build account acts as each of them alone; here they are read by account id.
#
# Names and delivery settings come from relayflow/topology.json, the file the local stack reads
# too (DESIGN invariant 10). Nothing in this directory spells a topic, subscription or queue name.

locals {
  topology = jsondecode(file("${path.module}/../../../../relayflow/topology.json"))

  project_number = data.google_project.main.number

  # Queues of each kind (RELAYFLOW_QUEUE_SHARDS): the environment's count, else the topology's
  # (the same for every kind). Every queue is keyed by its role for shard 0 and role-i for
  # shard i >= 1, named NAME and NAME-i (relayflow.core.queue_shards.shard_name): a deployment
  # that grows from one shard keeps its queue, its state address, its grants and its tasks.
  queue_shards = coalesce(var.queue_shards, local.topology.queues.steps.shards)
  queues = merge([
    for role, q in local.topology.queues : {
      for i in range(local.queue_shards) :
      (i == 0 ? role : "${role}-${i}") => merge(q, { name = i == 0 ? q.name : "${q.name}-${i}", shard = i, role = role })
    }
  ]...)

  # Cloud Run's deterministic URLs (https://SERVICE-PROJECT_NUMBER.REGION.run.app) are known
  # before the services exist. The worker and the poller each need both URLs (a step enqueues
  # polls, a poll enqueues the next step), so the services' `uri` outputs would form a cycle.
  url = {
    for name in ["start-flow", "worker", "poller", "api"] :
    name => "https://${name}-${local.project_number}.${var.region}.run.app"
  }

  common_env = {
    RELAYFLOW_PROJECT_ID            = var.project_id
    RELAYFLOW_LOCATION              = var.region
    RELAYFLOW_WORKER_URL            = local.url["worker"]
    RELAYFLOW_POLLER_URL            = local.url["poller"]
    RELAYFLOW_TASKS_SERVICE_ACCOUNT = data.google_service_account.tasks_invoker.email
    # Callback steps hand external systems {this}/callbacks/{token}: the api's URL.
    RELAYFLOW_API_URL          = local.url["api"]
    RELAYFLOW_VERIFY_TOKENS    = "true"
    RELAYFLOW_TRACE_EXPORTER   = var.trace_exporter
    RELAYFLOW_METRICS_EXPORTER = var.metrics_exporter
    # The flows this deployment runs (DESIGN invariant 13): module.path:attr, a Registry or a
    # callable taking Settings. Every component loads the same app.
    RELAYFLOW_APP = var.app
    # Tenants' limits and the dependencies' breakers (issue 11): every component admits starts,
    # calls dependencies or reports them.
    RELAYFLOW_TENANTS      = local.tenants_json
    RELAYFLOW_DEPENDENCIES = local.dependencies_json
    # The queues Terraform makes of each kind: every component routes a flow's tasks to its
    # shard among them.
    RELAYFLOW_QUEUE_SHARDS = tostring(local.queue_shards)
    # The keyset that seals flows' sensitive fields, encrypted by a Cloud KMS key (empty: none,
    # for an app whose flows mark no field): every component seals or opens them.
    RELAYFLOW_SENSITIVE_KEYSET  = var.sensitive_keyset
    RELAYFLOW_SENSITIVE_KEY_URI = var.sensitive_key_uri
    # Finished flows' documents expire this many days after they end (Firestore TTL), and their
    # offloaded payloads this many days after they were written (the bucket's lifecycle): one
    # variable for both.
    RELAYFLOW_RETENTION_DAYS = tostring(var.retention_days)
    # Where inputs, step outputs and results too large for a flow document are written: every
    # component writes some (start-flow inputs, worker and poller outputs and results, the api
    # callback outputs and signals) and reads them back.
    RELAYFLOW_OFFLOAD_BUCKET = module.offload.name
  }

  # Each tenant named in RELAYFLOW_TENANTS starts its flows on a topic of its own, with its own
  # push subscription to start-flow (topology.json tenant_requests, {tenant} filled in).
  tenant_requests = {
    for tenant in keys(coalesce(var.tenants.tenants, {})) : tenant => {
      topic        = replace(local.topology.tenant_requests.topic, "{tenant}", tenant)
      subscription = replace(local.topology.tenant_requests.subscription, "{tenant}", tenant)
    }
  }

  # The JSON the services read, as `relayflow local up --tenants FILE` reads it: fields left
  # unset in Terraform are left out, so relayflow's own defaults apply (one place defines them),
  # and no settings at all is {}.
  tenants_json = jsonencode({
    for section, value in {
      default = var.tenants.default == null ? null : { for k, v in var.tenants.default : k => v if v != null }
      tenants = var.tenants.tenants == null ? null : { for name, p in var.tenants.tenants : name => { for k, v in p : k => v if v != null } }
    } : section => value if value != null
  })
  dependencies_json = jsonencode({
    for section, value in {
      default      = var.dependencies.default == null ? null : { for k, v in var.dependencies.default : k => v if v != null }
      dependencies = var.dependencies.dependencies == null ? null : { for name, b in var.dependencies.dependencies : name => { for k, v in b : k => v if v != null } }
    } : section => value if value != null
  })

  # Which service each queue's tasks go to (relayflow.runtime.task_targets): steps and
  # compensations, of either priority, to the worker; polls to the poller. High-priority
  # tenants' tasks have queues of their own, dispatched beside the others' backlog.
  queue_service = {
    steps      = "worker"
    steps_high = "worker"
    polls      = "poller"
    polls_high = "poller"
  }
  # Cloud Tasks waits for a task handler up to its queue's dispatch deadline (set per task from
  # the topology); the service must not cut a request sooner on any queue it serves.
  handler_timeout_s = {
    for service in distinct(values(local.queue_service)) : service => max([
      for role, target in local.queue_service : local.topology.queues[role].dispatch_deadline_s if target == service
    ]...)
  }

  # Only the task handlers talk to the client API.
  handler_env = merge(local.common_env, { RELAYFLOW_CLIENT_API_URL = var.client_api_url })

  # The components that read and write flows, and enqueue Cloud Tasks (start, steps, polls,
  # operator retry, sweeper rescue) on any queue of the topology, by the flow's tenant's
  # priority. Values are unknown until apply; keys are static.
  runtime_members = {
    start-flow = module.start_flow.service_account_member
    worker     = module.worker.service_account_member
    poller     = module.poller.service_account_member
    api        = module.api.service_account_member
  }
  # On every shard of every queue (keys as local.queues': worker/steps, worker/steps-1, ...).
  enqueue_grants = {
    for pair in setproduct(keys(local.runtime_members), keys(local.queues)) :
    "${pair[0]}/${pair[1]}" => { member = local.runtime_members[pair[0]], queue = pair[1] }
  }

  # RunTask on every shard of every queue, for the components that bring put-off tasks forward:
  # the worker and the poller when a breaker closes, the api when an operator resumes a tenant.
  task_runners = {
    worker = module.worker.service_account_member
    poller = module.poller.service_account_member
    api    = module.api.service_account_member
  }
  run_grants = {
    for pair in setproduct(keys(local.task_runners), keys(local.queues)) :
    "${pair[0]}/${pair[1]}" => { member = local.task_runners[pair[0]], queue = pair[1] }
  }

  tasks_invoker_member = "serviceAccount:${data.google_service_account.tasks_invoker.email}"
  scheduler_member     = "serviceAccount:${data.google_service_account.scheduler.email}"
  pubsub_push_member   = "serviceAccount:${data.google_service_account.pubsub_push.email}"
  build_member         = "serviceAccount:${data.google_service_account.build.email}"

  # The api's callers by role, as IAM members (user:EMAIL or serviceAccount:EMAIL). IAM lets
  # them reach the service at all; the api gives each the role its email is listed under
  # (RELAYFLOW_API_VIEWERS, _OPERATORS, _COMPLETERS: the email in the caller's verified ID
  # token). People (viewers, operators) also get run.viewer, which `gcloud run services proxy`
  # needs; completers only invoke. Keys are the members themselves (static).
  api_people_members    = { for m in distinct(concat(var.api_viewers, var.api_operators)) : m => m }
  api_completer_members = { for m in var.api_completers : m => m }

  # Settings the api gets only when set, so that relayflow's own defaults apply otherwise: the
  # browser origins allowed to send state-changing requests (default: the api's own URL's
  # origin and the proxy's http://localhost:8080 and http://127.0.0.1:8080), and how young a
  # token for an extra audience must be.
  api_optional_env = merge(
    length(var.api_origins) == 0 ? {} : { RELAYFLOW_API_ORIGINS = jsonencode(var.api_origins) },
    length(var.api_sensitive_readers) == 0 ? {} : { RELAYFLOW_API_SENSITIVE_READERS = jsonencode(var.api_sensitive_readers) },
    length(var.api_token_audiences) == 0 ? {} : { RELAYFLOW_API_AUDIENCE_MAX_AGE_S = tostring(var.api_token_max_age_s) },
  )

  # APIs this module enables. serviceusage and cloudresourcemanager must be on before Terraform
  # runs at all (docs/deploy.md enables them with gcloud): enabling an API needs the first,
  # reading the project number the second.
  services = concat([
    "bigquery.googleapis.com",
    "cloudscheduler.googleapis.com",
    "cloudtasks.googleapis.com",
    "cloudtrace.googleapis.com",
    "firestore.googleapis.com",
    "iam.googleapis.com",
    "monitoring.googleapis.com",
    "pubsub.googleapis.com",
    "run.googleapis.com",
    "storage.googleapis.com",
  ], local.cmek ? ["cloudkms.googleapis.com"] : [])

  # --- Customer-managed encryption keys (infra/terraform/README.md, "Customer-managed
  # encryption keys") ---------------------------------------------------------------------
  cmek = var.cmek.enabled
  # A key must be in the location of the data it protects. Firestore's multi-regions map to
  # Cloud KMS's (https://cloud.google.com/firestore/docs/reference/rest/v1/projects.databases#cmekconfig):
  # nam5 to us, eur3 to europe; a regional database takes a key of its region. Pub/Sub takes a
  # key in any location; Cloud Tasks' and the bucket's are the region's.
  firestore_kms_location = lookup({ nam5 = "us", eur3 = "europe" }, var.firestore_location, var.firestore_location)
  # The analytics dataset's key is in the dataset's location: BigQuery's multi-regions US and EU
  # are Cloud KMS's us and europe (https://cloud.google.com/bigquery/docs/customer-managed-encryption#supported_locations).
  bigquery_kms_location = lookup({ US = "us", EU = "europe" }, var.analytics.location, lower(var.analytics.location))
  cmek_keys = local.cmek ? {
    firestore = { location = local.firestore_kms_location }
    pubsub    = { location = var.region }
    tasks     = { location = var.region }
    storage   = { location = var.region }
    bigquery  = { location = local.bigquery_kms_location }
  } : {}
  # The service agent of each store, the one principal its key is granted to: Firestore's and
  # Cloud Tasks' identities, Pub/Sub's, and Cloud Storage's (google_project_service_identity
  # and the data source below make them exist).
  key_users = local.cmek ? {
    firestore = google_project_service_identity.firestore[0].member
    pubsub    = google_project_service_identity.pubsub.member
    tasks     = google_project_service_identity.cloudtasks[0].member
    storage   = data.google_storage_project_service_account.main[0].member
    bigquery  = data.google_bigquery_default_service_account.main[0].member
  } : {}
  # Each store's key as its grant names it, handed out once the grants have had time to reach
  # Cloud KMS (terraform_data.key_grants_visible): whatever names a key is created after its
  # service agent may use it, as creating a store with a key it may not use fails. null with
  # CMEK off: the stores keep Google-managed encryption.
  kms_key = {
    for store in ["firestore", "pubsub", "tasks", "storage", "bigquery"] :
    store => local.cmek ? terraform_data.key_grants_visible[0].output[store] : null
  }

  # Large maps and lists of a flow document that no query reads (issue 7): each map key and list
  # element would be an index entry, and a document may have 40,000. Queried fields (status,
  # updated_at, next_run_at, finished_at, result_published, flow, version, tenant, created_at,
  # admission, queued_at) keep their indexes. effects and tracks grow with ForEach items and
  # parallel branches; signals and signal_ids (signals kept for a WaitForSignal, ids taken)
  # are read with the document only, as is reset (an operator's reset to a step: the steps it
  # runs again, the undos it has left). labels (a map: one index entry a key) are queried
  # through label_index, which keeps its array-contains index for counts by label. A ForEach
  # lane's document is a flow document plus its
  # items and their outputs.
  #
  # A dependency's breaker and its call windows are rewritten on every transition and on every
  # call outcome (issue 11): the breaker's recent transitions and a window's per-interval buckets
  # would otherwise add an index entry per element to each of those writes. Nothing filters on
  # them (breaker_windows are found by dependency). Tenant slots are found by tenant only: their
  # times and holders (which move with the flows) are exempt; tenant states keep the defaults.
  #
  # Times that move forward with every write or every flow (updated_at, next_run_at, ...) would
  # make one index range take every write of the collection, about 500 a second
  # (https://cloud.google.com/firestore/docs/best-practices#high_read_write_and_delete_rates_to_a_narrow_document_range):
  # their single-field indexes are off too, and they are indexed only in the composite indexes
  # below, behind `shard`. So are values that rise with the flows (Pub/Sub message ids, the
  # keys lanes and slots name). expire_at is the TTL field's (google_firestore_field.ttl).
  #
  # A bulk action (issue 23) is found by its id, listed by created_at and swept by state: its
  # maps, lists and texts and the times its batches move are exempt; a chunk of its rows (100
  # flows' previews and outcomes) is read whole, so its rows list is too.
  unindexed_fields = {
    (local.topology.firestore.flows_collection)           = ["input", "outputs", "history", "result", "pending_result", "error", "next", "claim", "effects", "tracks", "cleanup", "reset", "updated_at", "next_run_at", "finished_at", "queued_at", "created_at", "deadline_at", "aside_until", "message_id", "lanes", "slot", "flow_id", "parent", "signals", "signal_ids", "child_of", "labels"]
    (local.topology.firestore.lanes_collection)           = ["input", "outputs", "history", "items", "item_outputs", "effects", "tracks", "result", "pending_result", "cleanup", "updated_at", "next_run_at", "finished_at", "queued_at", "created_at", "deadline_at", "aside_until", "message_id", "flow_id", "parent", "signals", "signal_ids", "child_of", "labels"]
    (local.topology.firestore.rejected_collection)        = ["data_base64", "attributes", "reason", "rejected_at", "message_id", "task"]
    (local.topology.firestore.tenant_slots_collection)    = ["taken_at", "free_at", "holder"]
    (local.topology.firestore.breakers_collection)        = ["transitions"]
    (local.topology.firestore.breaker_windows_collection) = ["buckets"]
    (local.topology.firestore.bulk_actions_collection)    = ["filter", "refused", "skipped_why", "errors", "log", "reason", "waiting", "updated_at", "started_at", "finished_at", "next_at"]
    (local.topology.firestore.bulk_rows_collection)       = ["rows"]
  }

  # What a service that receives a Pub/Sub push needs besides its own invoker grants before the
  # first message arrives: the database with its indexes and field settings, the queues, and
  # every grant a runtime account holds. (The service agent's right to mint the push token, and
  # the services' actAs on the tasks-invoker, are the bootstrap's: they exist before this apply.)
  push_prerequisites = concat(
    module.firestore.resource_ids,
    values(module.queues.ids),
    local.runtime_grant_ids,
  )

  # Everything a component's runtime account is granted: a component can serve only after these.
  runtime_grant_ids = concat(
    [for g in google_project_iam_member.firestore_user : g.id],
    [for g in google_project_iam_member.trace_agent : g.id],
    [for g in google_project_iam_member.metric_writer : g.id],
    [for g in google_cloud_tasks_queue_iam_member.enqueuer : g.id],
    [for g in google_cloud_tasks_queue_iam_member.sweeper_viewer : g.id],
    [for g in google_pubsub_topic_iam_member.results_publisher : g.id],
    [for g in google_storage_bucket_iam_member.offload_creator : g.id],
    [for g in google_storage_bucket_iam_member.offload_viewer : g.id],
  )
}

data "google_project" "main" {
  project_id = var.project_id
}

resource "google_project_service" "main" {
  for_each = toset(local.services)

  project            = var.project_id
  service            = each.value
  disable_on_destroy = false
}

# Pub/Sub's service agent moves dead letters (and mints the push OIDC token: the bootstrap grants
# that). It is created on demand, not necessarily when the API is enabled; granting it anything
# before it exists fails. This resource (google-beta only) makes it exist and names it.
resource "google_project_service_identity" "pubsub" {
  provider = google-beta

  project = var.project_id
  service = "pubsub.googleapis.com"

  depends_on = [google_project_service.main]
}

# The service agents that encrypt and decrypt with the environment's keys when CMEK is on. Like
# Pub/Sub's, Firestore's and Cloud Tasks' agents may not exist yet on a fresh project; these make
# them exist before they are granted a key. Cloud Storage's is made to exist by reading it (the
# data source calls projects.serviceAccount.get, which creates it:
# https://cloud.google.com/storage/docs/projects#service-agents).
resource "google_project_service_identity" "firestore" {
  count    = local.cmek ? 1 : 0
  provider = google-beta

  project = var.project_id
  service = "firestore.googleapis.com"

  depends_on = [google_project_service.main]
}

resource "google_project_service_identity" "cloudtasks" {
  count    = local.cmek ? 1 : 0
  provider = google-beta

  project = var.project_id
  service = "cloudtasks.googleapis.com"

  depends_on = [google_project_service.main]
}

data "google_storage_project_service_account" "main" {
  count = local.cmek ? 1 : 0

  project = var.project_id

  depends_on = [google_project_service.main]
}

# BigQuery encrypts the analytics dataset with its key as this account (it exists once asked for).
data "google_bigquery_default_service_account" "main" {
  count = local.cmek ? 1 : 0

  project = var.project_id

  depends_on = [google_project_service.main]
}

# --- Identities that are not a service's runtime account -------------------------------------

# The bootstrap creates them (and lets each runtime account act as the tasks-invoker, and the
# Pub/Sub agent mint the push account's token); this apply reads them.

# In the OIDC token of every relayflow task; may invoke the worker and the poller, nothing else.
data "google_service_account" "tasks_invoker" {
  project    = var.project_id
  account_id = "relayflow-tasks"

  depends_on = [google_project_service.main]
}

# In the OIDC token of each message Pub/Sub pushes; may invoke start-flow and the api.
data "google_service_account" "pubsub_push" {
  project    = var.project_id
  account_id = "relayflow-pubsub-push"

  depends_on = [google_project_service.main]
}

# In the OIDC token of the periodic POST /sweep; may invoke the worker, nothing else.
data "google_service_account" "scheduler" {
  project    = var.project_id
  account_id = "relayflow-scheduler"

  depends_on = [google_project_service.main]
}

# Runs every deploy (the bootstrap creates it); before each, cloudbuild.yaml asks the api whether
# the app it deploys drops a version flows still run on (`relayflow versions check`, GET
# /versions), so it reaches the api as a viewer. Reading flows adds nothing to what it already
# may do: it deploys the api's code and acts as the api's account.
data "google_service_account" "build" {
  project    = var.project_id
  account_id = "relayflow-build"

  depends_on = [google_project_service.main]
}

# --- Customer-managed encryption keys ---------------------------------------------------------

# One key per store of flow data (modules/kms says why), only with CMEK on.
module "kms" {
  source = "../kms"

  project_id      = var.project_id
  keys            = local.cmek_keys
  rotation_period = var.cmek.rotation_period
  labels          = var.labels

  depends_on = [google_project_service.main]
}

# Each store's service agent may encrypt and decrypt with its own store's key, nothing else.
resource "google_kms_crypto_key_iam_member" "agent" {
  for_each = local.key_users

  crypto_key_id = module.kms.ids[each.key]
  role          = "roles/cloudkms.cryptoKeyEncrypterDecrypter"
  member        = each.value
}

# A grant takes effect everywhere within about two minutes, sometimes more
# (https://cloud.google.com/iam/docs/access-change-propagation); a store created with a key its
# agent may not use yet fails. The key ids go out through this resource (local.kms_key), so
# every store that names a key waits, once, after the grants are made.
resource "terraform_data" "key_grants_visible" {
  count = local.cmek ? 1 : 0

  input            = { for store, grant in google_kms_crypto_key_iam_member.agent : store => grant.crypto_key_id }
  triggers_replace = [for grant in google_kms_crypto_key_iam_member.agent : grant.id]

  provisioner "local-exec" {
    command = "sleep ${var.cmek.grant_wait_s}"
  }
}

# --- Data plane -------------------------------------------------------------------------------

module "firestore" {
  source = "../firestore"

  project_id             = var.project_id
  kms_key_name           = local.kms_key["firestore"]
  location_id            = var.firestore_location
  point_in_time_recovery = var.firestore_point_in_time_recovery
  deletion_protection    = var.deletion_protection
  # History expires (retention_days after a flow ends or a message is refused); live state
  # never does: tenant slots and states, breakers and their windows are read on every start or
  # call and overwritten in place, and a TTL deletion would free a held slot or forget an open
  # breaker behind the engine's back.
  ttl_collections = [
    local.topology.firestore.flows_collection,
    local.topology.firestore.lanes_collection,
    local.topology.firestore.rejected_collection,
    local.topology.firestore.bulk_actions_collection,
    local.topology.firestore.bulk_rows_collection,
  ]
  unindexed_fields = local.unindexed_fields
  # Every composite index leads with `shard` (relayflow.gcp.store.keys): its entries for a
  # time that moves forward spread over topology.json's firestore.shards ranges instead of
  # one, which takes about 500 writes/s (https://cloud.google.com/firestore/docs/best-practices#high_read_write_and_delete_rates_to_a_narrow_document_range);
  # each query asks every shard with shard == s and merges (relayflow.gcp.store.merge).
  composite_indexes = {
    # GET /flows and the console's lists (relayflow.gcp.store.FlowStore._listing), and
    # relayflow.store.recent (same order; list_status serves its status == S): equality
    # filters on flow, status, version, then updated_at and flow_id descending (flow_id breaks
    # ties for the page cursor), optionally a range on updated_at. Firestore merges the
    # one-field indexes below for any mix of equality filters, so there is one per filter and
    # one for the unfiltered list, not one per combination.
    list_updated_at = {
      collection = local.topology.firestore.flows_collection
      fields = [
        { field_path = "shard", order = "ASCENDING" },
        { field_path = "updated_at", order = "DESCENDING" },
        { field_path = "flow_id", order = "DESCENDING" },
      ]
    }
    list_flow = {
      collection = local.topology.firestore.flows_collection
      fields = [
        { field_path = "shard", order = "ASCENDING" },
        { field_path = "flow", order = "ASCENDING" },
        { field_path = "updated_at", order = "DESCENDING" },
        { field_path = "flow_id", order = "DESCENDING" },
      ]
    }
    list_status = {
      collection = local.topology.firestore.flows_collection
      fields = [
        { field_path = "shard", order = "ASCENDING" },
        { field_path = "status", order = "ASCENDING" },
        { field_path = "updated_at", order = "DESCENDING" },
        { field_path = "flow_id", order = "DESCENDING" },
      ]
    }
    list_version = {
      collection = local.topology.firestore.flows_collection
      fields = [
        { field_path = "shard", order = "ASCENDING" },
        { field_path = "version", order = "ASCENDING" },
        { field_path = "updated_at", order = "DESCENDING" },
        { field_path = "flow_id", order = "DESCENDING" },
      ]
    }
    # Lists of one tenant's flows (issue 11), as the lists above; the console's most common
    # view of a tenant, its flows in one status, gets its own index rather than a merge.
    list_tenant = {
      collection = local.topology.firestore.flows_collection
      fields = [
        { field_path = "shard", order = "ASCENDING" },
        { field_path = "tenant", order = "ASCENDING" },
        { field_path = "updated_at", order = "DESCENDING" },
        { field_path = "flow_id", order = "DESCENDING" },
      ]
    }
    list_tenant_status = {
      collection = local.topology.firestore.flows_collection
      fields = [
        { field_path = "shard", order = "ASCENDING" },
        { field_path = "tenant", order = "ASCENDING" },
        { field_path = "status", order = "ASCENDING" },
        { field_path = "updated_at", order = "DESCENDING" },
        { field_path = "flow_id", order = "DESCENDING" },
      ]
    }
    # A parent's children (``relayflow list --parent``, issue 21): ``parent_spread`` is the
    # parent's key behind its hash prefix, so its entries spread as ``id_spread``'s do.
    list_parent = {
      collection = local.topology.firestore.flows_collection
      fields = [
        { field_path = "shard", order = "ASCENDING" },
        { field_path = "parent_spread", order = "ASCENDING" },
        { field_path = "updated_at", order = "DESCENDING" },
        { field_path = "flow_id", order = "DESCENDING" },
      ]
    }
    # Flows by label (``relayflow list --label order_id=123``, issue 23): label_index holds a
    # flow's labels as "key=value" strings, asked array-contains (one such filter a query:
    # a second label is checked on the flows found, relayflow.core.listing.sifted). One index
    # for every key; Firestore merges it with the one-field indexes above for label + tenant,
    # status, ... as it merges those (array-contains is an equality for index merging), and a
    # label is selective enough that no combination needs its own. Each label is an entry,
    # rewritten with updated_at on every write of its flow: labels are bounded (16).
    list_label = {
      collection = local.topology.firestore.flows_collection
      fields = [
        { field_path = "shard", order = "ASCENDING" },
        { field_path = "label_index", array_config = "CONTAINS" },
        { field_path = "updated_at", order = "DESCENDING" },
        { field_path = "flow_id", order = "DESCENDING" },
      ]
    }
    # Ended flows by result code (``--code RETRIES_EXHAUSTED``): result.code sits in the
    # result map, which keeps no single-field index, so counts by code are sharded too.
    list_code = {
      collection = local.topology.firestore.flows_collection
      fields = [
        { field_path = "shard", order = "ASCENDING" },
        { field_path = "result.code", order = "ASCENDING" },
        { field_path = "updated_at", order = "DESCENDING" },
        { field_path = "flow_id", order = "DESCENDING" },
      ]
    }
    # Flows a dependency holds up or failed (``--dependency payments``: FlowRecord.dependency).
    list_dependency = {
      collection = local.topology.firestore.flows_collection
      fields = [
        { field_path = "shard", order = "ASCENDING" },
        { field_path = "dependency", order = "ASCENDING" },
        { field_path = "updated_at", order = "DESCENDING" },
        { field_path = "flow_id", order = "DESCENDING" },
      ]
    }
    # relayflow.store.waiting: admission == "waiting" order by queued_at (starts over their
    # tenant's limits, admitted oldest first), of every tenant and of one.
    waiting_queued_at = {
      collection = local.topology.firestore.flows_collection
      fields = [
        { field_path = "shard", order = "ASCENDING" },
        { field_path = "admission", order = "ASCENDING" },
        { field_path = "queued_at", order = "ASCENDING" },
      ]
    }
    waiting_tenant_queued_at = {
      collection = local.topology.firestore.flows_collection
      fields = [
        { field_path = "shard", order = "ASCENDING" },
        { field_path = "admission", order = "ASCENDING" },
        { field_path = "tenant", order = "ASCENDING" },
        { field_path = "queued_at", order = "ASCENDING" },
      ]
    }
    # relayflow.store.overdue: status in [...] and next_run_at < cutoff (sweeper).
    status_next_run_at = {
      collection = local.topology.firestore.flows_collection
      fields = [
        { field_path = "shard", order = "ASCENDING" },
        { field_path = "status", order = "ASCENDING" },
        { field_path = "next_run_at", order = "ASCENDING" },
      ]
    }
    # relayflow.store.unpublished: result_published == false and finished_at < cutoff (sweeper).
    unpublished_finished_at = {
      collection = local.topology.firestore.flows_collection
      fields = [
        { field_path = "shard", order = "ASCENDING" },
        { field_path = "result_published", order = "ASCENDING" },
        { field_path = "finished_at", order = "ASCENDING" },
      ]
    }
    # Tenant slots are found by tenant == T and breaker windows by dependency == D: one field
    # each, served by the automatic single-field indexes.
    #
    # The sweeper asks the same two questions of ForEach lanes (relayflow.store.overdue and
    # .unpublished read both collections); nothing lists lanes by updated_at.
    lanes_status_next_run_at = {
      collection = local.topology.firestore.lanes_collection
      fields = [
        { field_path = "shard", order = "ASCENDING" },
        { field_path = "status", order = "ASCENDING" },
        { field_path = "next_run_at", order = "ASCENDING" },
      ]
    }
    lanes_unpublished_finished_at = {
      collection = local.topology.firestore.lanes_collection
      fields = [
        { field_path = "shard", order = "ASCENDING" },
        { field_path = "result_published", order = "ASCENDING" },
        { field_path = "finished_at", order = "ASCENDING" },
      ]
    }
    # relayflow.store.rejected_messages: order by rejected_at desc, __name__ desc (the console's
    # refused messages, paged).
    rejected_rejected_at = {
      collection = local.topology.firestore.rejected_collection
      fields = [
        { field_path = "shard", order = "ASCENDING" },
        { field_path = "rejected_at", order = "DESCENDING" },
      ]
    }
  }

  depends_on = [google_project_service.main]
}

module "queues" {
  source = "../queues"

  project_id         = var.project_id
  location           = var.region
  queues             = local.queues
  log_sampling_ratio = var.tasks_log_sampling_ratio

  depends_on = [google_project_service.main]
}

# Payloads too large for a flow document (RELAYFLOW_OFFLOAD_BUCKET), kept as long as the flows.
module "offload" {
  source = "../offload"

  project_id     = var.project_id
  name           = coalesce(var.offload_bucket_name, "${var.project_id}-relayflow-offload")
  location       = var.region
  retention_days = var.retention_days
  kms_key_name   = local.kms_key["storage"]
  labels         = var.labels

  depends_on = [google_project_service.main]
}

module "messaging" {
  source = "../messaging"

  project_id           = var.project_id
  pubsub_service_agent = google_project_service_identity.pubsub.member
  topics               = local.topology.topics
  start_subscription   = local.topology.subscriptions.start
  signals_subscription = local.topology.subscriptions.signals
  hold_subscriptions = {
    dead_letter = local.topology.subscriptions.dead_letter
    results     = local.topology.subscriptions.results
  }
  # Each start subscription pushes to {uri}/projects/P/topics/T, T its own topic: the path lets
  # functions-framework name the topic in the CloudEvent's source, and the start function takes
  # the tenant from it; any path reaches the function.
  push_url                   = module.start_flow.uri
  tenant_requests            = local.tenant_requests
  push_audience              = module.start_flow.uri
  push_service_account_email = data.google_service_account.pubsub_push.email
  labels                     = var.labels
  kms_key_name               = local.kms_key["pubsub"]

  # start-flow writes the flow (database, indexes, field settings), enqueues its first task
  # (queues and the grants on them), may publish a result, and must admit the push (invoker
  # grant; token creator for the service agent).
  push_after = concat(module.start_flow.access_grant_ids, local.push_prerequisites)

  # Signals go to the api's POST /signals, which completes callback tokens (Engine.complete
  # writes the flow or lane, enqueues the next task, may publish a result), signed as the same
  # push account, which is why it may invoke the api too.
  signals_push_endpoint = "${module.api.uri}/signals"
  # The audience the api checks in every token it is sent (RELAYFLOW_API_URL): its
  # deterministic URL, one of the service's custom audiences so Cloud Run admits it as well.
  signals_push_audience = local.url["api"]
  signals_push_after    = concat(module.api.access_grant_ids, local.push_prerequisites)

  request_publishers    = var.request_publishers
  tenant_publishers     = var.tenant_publishers
  signal_publishers     = var.signal_publishers
  result_subscribers    = var.result_subscribers
  dead_letter_replayers = var.dead_letter_replayers
  # The console's and the CLI's dead-letter pages and replays run as the api.
  api_member = module.api.service_account_member

  depends_on = [google_project_service.main]
}

# Every result event in BigQuery (docs/analytics.md), unless the environment turns it off.
module "analytics" {
  source = "../analytics"
  count  = var.analytics.enabled ? 1 : 0

  project_id           = var.project_id
  location             = var.analytics.location
  retention_days       = var.analytics.retention_days
  dataset_id           = local.topology.analytics.dataset
  table_id             = local.topology.analytics.table
  results_topic_id     = module.messaging.topic_ids["results"]
  subscription         = local.topology.analytics.subscription
  dead_letter          = local.topology.analytics.dead_letter
  pubsub_service_agent = google_project_service_identity.pubsub.member
  # With CMEK on, the dataset (and so the table) under BigQuery's key, the dead-letter topic
  # under Pub/Sub's; null keeps Google-managed encryption.
  kms_key_name        = local.kms_key["bigquery"]
  topic_kms_key_name  = local.kms_key["pubsub"]
  deletion_protection = var.deletion_protection
  labels              = var.labels

  depends_on = [google_project_service.main]
}

# --- Cloud Run services -----------------------------------------------------------------------

module "start_flow" {
  source = "../service"

  project_id         = var.project_id
  location           = var.region
  name               = "start-flow"
  description        = "Starts flows from Pub/Sub pushes of flow requests (functions-framework CloudEvent function)."
  service_account_id = "relayflow-start-flow"
  image              = var.image
  env                = merge(local.common_env, { COMPONENT = "start-flow" })
  invoker_members    = { pubsub_push = local.pubsub_push_member }
  max_instances      = var.max_instances["start-flow"]
  min_instances      = var.min_instances["start-flow"]
  max_concurrency    = var.concurrency["start-flow"]
  # Pub/Sub redelivers a push still running after the ack deadline: answer well within it.
  request_timeout_s   = local.topology.subscriptions.start.ack_deadline_s
  labels              = var.labels
  deletion_protection = var.deletion_protection

  depends_on = [google_project_service.main]
}

module "worker" {
  source = "../service"

  project_id         = var.project_id
  location           = var.region
  name               = "worker"
  description        = "Runs action steps and compensations dispatched by Cloud Tasks."
  service_account_id = "relayflow-worker"
  image              = var.image
  env = merge(local.handler_env, {
    COMPONENT        = "worker"
    GUNICORN_THREADS = tostring(var.concurrency["worker"])
    # The worker's token check admits the scheduler's calls to POST /sweep.
    RELAYFLOW_SCHEDULER_SERVICE_ACCOUNTS = jsonencode([data.google_service_account.scheduler.email])
  })
  invoker_members     = { tasks = local.tasks_invoker_member, scheduler = local.scheduler_member }
  custom_audiences    = [local.url["worker"]]
  max_instances       = var.max_instances["worker"]
  min_instances       = var.min_instances["worker"]
  max_concurrency     = var.concurrency["worker"]
  request_timeout_s   = local.handler_timeout_s["worker"]
  labels              = var.labels
  deletion_protection = var.deletion_protection

  depends_on = [google_project_service.main]
}

module "poller" {
  source = "../service"

  project_id          = var.project_id
  location            = var.region
  name                = "poller"
  description         = "Runs poll steps dispatched by Cloud Tasks; re-enqueues itself with backoff."
  service_account_id  = "relayflow-poller"
  image               = var.image
  env                 = merge(local.handler_env, { COMPONENT = "poller", GUNICORN_THREADS = tostring(var.concurrency["poller"]) })
  invoker_members     = { tasks = local.tasks_invoker_member }
  custom_audiences    = [local.url["poller"]]
  max_instances       = var.max_instances["poller"]
  min_instances       = var.min_instances["poller"]
  max_concurrency     = var.concurrency["poller"]
  request_timeout_s   = local.handler_timeout_s["poller"]
  labels              = var.labels
  deletion_protection = var.deletion_protection

  depends_on = [google_project_service.main]
}

module "api" {
  source = "../service"

  project_id         = var.project_id
  location           = var.region
  name               = "api"
  description        = "Reads and operates flows (GET /flows/{id}, list, cancel, retry) and tenants (pause, resume), shows breakers; completes callback tokens (POST /callbacks/{token}, signals pushed to /signals)."
  service_account_id = "relayflow-api"
  image              = var.image
  env = merge(local.common_env, {
    COMPONENT        = "api"
    GUNICORN_THREADS = tostring(var.concurrency["api"])
    # Tokens for the api's URL, and for the audiences named here (none by default:
    # infra/terraform/README.md, "People and the api").
    RELAYFLOW_API_AUDIENCES = jsonencode(var.api_token_audiences)
    # The build account checks each deploy against GET /versions (relayflow versions check).
    RELAYFLOW_API_VIEWERS   = jsonencode(concat([for m in var.api_viewers : split(":", m)[1]], [data.google_service_account.build.email]))
    RELAYFLOW_API_OPERATORS = jsonencode([for m in var.api_operators : split(":", m)[1]])
    # The push account delivers flow-signals to /signals: it may complete tokens, nothing else.
    RELAYFLOW_API_COMPLETERS = jsonencode(concat([for m in var.api_completers : split(":", m)[1]], [data.google_service_account.pubsub_push.email]))
    # Which tenants each caller may see and operate; callers not listed see all.
    RELAYFLOW_API_SCOPES = jsonencode(var.api_scopes)
  }, local.api_optional_env)
  # Operators reach the api (and its console) with `gcloud run services proxy api`, which needs
  # the service reachable from their machine (ingress) and run.invoker + run.viewer on it.
  # External systems that complete callback tokens over HTTP are invokers in the same way.
  # Pub/Sub pushes signals to /signals as the push account (invoker only).
  ingress             = var.api_ingress
  invoker_members     = merge(local.api_people_members, local.api_completer_members, { pubsub_push = local.pubsub_push_member, versions_check = local.build_member })
  viewer_members      = local.api_people_members
  custom_audiences    = [local.url["api"]]
  max_instances       = var.max_instances["api"]
  min_instances       = var.min_instances["api"]
  max_concurrency     = var.concurrency["api"]
  labels              = var.labels
  deletion_protection = var.deletion_protection

  depends_on = [google_project_service.main]
}

# --- What each component may do ---------------------------------------------------------------

# Firestore grants data access per project only (no per-collection IAM), so roles/datastore.user
# is project-wide; the project holds nothing but relayflow.
resource "google_project_iam_member" "firestore_user" {
  for_each = local.runtime_members

  project = var.project_id
  role    = "roles/datastore.user"
  member  = each.value
}

# Writing spans to Cloud Trace: granted per project only (there is no per-trace resource).
resource "google_project_iam_member" "trace_agent" {
  for_each = local.runtime_members

  project = var.project_id
  role    = "roles/cloudtrace.agent"
  member  = each.value
}

# Writing relayflow's OpenTelemetry metrics to Cloud Monitoring: granted per project only (there
# is no per-metric resource).
resource "google_project_iam_member" "metric_writer" {
  for_each = local.runtime_members

  project = var.project_id
  role    = "roles/monitoring.metricWriter"
  member  = each.value
}

# Enqueue rights on relayflow's queues only (every queue of the topology: a component enqueues a
# high-priority tenant's tasks on the high queues), not on every queue in the project.
resource "google_cloud_tasks_queue_iam_member" "enqueuer" {
  for_each = local.enqueue_grants

  project  = var.project_id
  location = var.region
  name     = module.queues.names[each.value.queue]
  role     = "roles/cloudtasks.enqueuer"
  member   = each.value.member
}

# Run rights (cloudtasks.tasks.run: RunTask dispatches a task now) on relayflow's queues only, for
# the components that bring put-off tasks forward; the enqueuer role does not hold them.
resource "google_cloud_tasks_queue_iam_member" "task_runner" {
  for_each = local.run_grants

  project  = var.project_id
  location = var.region
  name     = module.queues.names[each.value.queue]
  role     = "roles/cloudtasks.taskRunner"
  member   = each.value.member
}

# The sweeper (POST /sweep on the worker) asks whether an overdue flow's task still exists
# (GetTask) before it re-enqueues one.
resource "google_cloud_tasks_queue_iam_member" "sweeper_viewer" {
  for_each = module.queues.names

  project  = var.project_id
  location = var.region
  name     = each.value
  role     = "roles/cloudtasks.viewer"
  member   = module.worker.service_account_member
}

# The api shows a polling flow's polls in flight, read from its poll chain's newest task
# (GetTask with the FULL view: tasks.get is the viewer role's, tasks.fullView the enqueuer's).
resource "google_cloud_tasks_queue_iam_member" "api_viewer" {
  for_each = module.queues.names

  project  = var.project_id
  location = var.region
  name     = each.value
  role     = "roles/cloudtasks.viewer"
  member   = module.api.service_account_member
}

# Every component settles what it commits (Engine._settle): a terminal flow whose event is not
# out yet gets it published by whoever sees it next (worker, poller, api cancel, a duplicate
# start). Publish rights on the results topic only.
resource "google_pubsub_topic_iam_member" "results_publisher" {
  for_each = local.runtime_members

  project = var.project_id
  topic   = module.messaging.topic_names["results"]
  role    = "roles/pubsub.publisher"
  member  = each.value
}

# Offloaded payloads: every component writes some and reads them back (local.common_env). Objects
# are write-once (named by their content), so creating them is enough: no component may replace
# or delete one; the bucket's lifecycle deletes them. Reading (objectViewer: get and list) shows
# nothing Firestore does not already (roles/datastore.user reads every flow).
resource "google_storage_bucket_iam_member" "offload_creator" {
  for_each = local.runtime_members

  bucket = module.offload.name
  role   = "roles/storage.objectCreator"
  member = each.value
}

resource "google_storage_bucket_iam_member" "offload_viewer" {
  for_each = local.runtime_members

  bucket = module.offload.name
  role   = "roles/storage.objectViewer"
  member = each.value
}

# --- Sweeper ----------------------------------------------------------------------------------

# Re-enqueues flows whose next task is overdue (DESIGN invariant 5); the worker hosts /sweep.
resource "google_cloud_scheduler_job" "sweep" {
  project          = var.project_id
  region           = var.region
  name             = "relayflow-sweep"
  description      = "POST /sweep on the worker: rescue flows whose next task is overdue."
  schedule         = var.sweep_schedule
  time_zone        = "Etc/UTC"
  attempt_deadline = "60s"

  retry_config {
    retry_count = 0
  }

  http_target {
    http_method = "POST"
    uri         = "${local.url["worker"]}/sweep"

    oidc_token {
      service_account_email = data.google_service_account.scheduler.email
      audience              = local.url["worker"]
    }
  }

  # The job calls the worker as soon as it exists: the worker must be serving, admit the
  # scheduler's token, and hold every grant a sweep uses (Firestore, queues, results topic).
  depends_on = [
    google_project_service.main,
    module.worker,
    module.firestore,
    module.queues,
    google_project_iam_member.firestore_user,
    google_project_iam_member.trace_agent,
    google_project_iam_member.metric_writer,
    google_cloud_tasks_queue_iam_member.enqueuer,
    google_cloud_tasks_queue_iam_member.sweeper_viewer,
    google_pubsub_topic_iam_member.results_publisher,
    google_storage_bucket_iam_member.offload_creator,
    google_storage_bucket_iam_member.offload_viewer,
  ]
}

# The app's schedules: ONE fixed job for all of them, so adding or changing a schedule is a code
# change and a deploy, never a Terraform edit (and no job per schedule against the default
# 1,000 jobs per region: https://cloud.google.com/scheduler/quotas). Every minute, the
# finest a cron schedule of Cloud Scheduler's runs
# (https://cloud.google.com/scheduler/docs/configuring/cron-job-schedules); the worker works
# out each schedule's due ticks. No retries: a missed minute is caught up by the next run.
resource "google_cloud_scheduler_job" "schedules" {
  project          = var.project_id
  region           = var.region
  name             = "relayflow-schedules"
  description      = "POST /schedules/tick on the worker: start the flows of the app's due schedule ticks."
  schedule         = "* * * * *"
  time_zone        = "Etc/UTC"
  attempt_deadline = "60s"

  retry_config {
    retry_count = 0
  }

  http_target {
    http_method = "POST"
    uri         = "${local.url["worker"]}/schedules/tick"

    # The same least-privilege identity as the sweep's: it may invoke the worker and nothing
    # else; the tick runs with the worker's own grants (Firestore, queues, results topic).
    oidc_token {
      service_account_email = data.google_service_account.scheduler.email
      audience              = local.url["worker"]
    }
  }

  depends_on = [
    google_project_service.main,
    module.worker,
    module.firestore,
    module.queues,
    google_project_iam_member.firestore_user,
    google_project_iam_member.trace_agent,
    google_project_iam_member.metric_writer,
    google_cloud_tasks_queue_iam_member.enqueuer,
    google_cloud_tasks_queue_iam_member.sweeper_viewer,
    google_pubsub_topic_iam_member.results_publisher,
    google_storage_bucket_iam_member.offload_creator,
    google_storage_bucket_iam_member.offload_viewer,
  ]
}

# --- Alerts and dashboard ---------------------------------------------------------------------

module "monitoring" {
  source = "../monitoring"

  project_id            = var.project_id
  notification_channels = var.notification_channels
  runbook_url           = var.runbook_url
  services              = [module.start_flow.name, module.worker.name, module.poller.name, module.api.name]
  # Each kind's own name; its shards (NAME-i) are watched with it.
  queues                   = [for role, q in local.topology.queues : q.name]
  queue_shards             = local.queue_shards
  dead_letter_subscription = module.messaging.hold_subscription_names["dead_letter"]
  overdue_age_threshold_s  = var.alert_thresholds.overdue_age_s
  failed_flows_per_minute  = var.alert_thresholds.failed_flows_per_minute
  error_ratio_5xx          = var.alert_thresholds.error_ratio_5xx
  task_failures_per_minute = var.alert_thresholds.task_failures_per_minute
  breaker_open_threshold_s = var.alert_thresholds.breaker_open_s
  labels                   = var.labels

  depends_on = [google_project_service.main]
}

# The deterministic URLs above are an assumption about Cloud Run; fail loudly if it ever breaks.
check "deterministic_urls" {
  assert {
    condition = alltrue([
      contains(module.start_flow.urls, local.url["start-flow"]),
      contains(module.worker.urls, local.url["worker"]),
      contains(module.poller.urls, local.url["poller"]),
      contains(module.api.urls, local.url["api"]),
    ])
    error_message = "A Cloud Run service does not serve its deterministic URL; RELAYFLOW_WORKER_URL / RELAYFLOW_POLLER_URL would be wrong."
  }
}
