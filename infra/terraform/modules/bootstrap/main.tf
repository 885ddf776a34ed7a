# What one environment needs before its first build can run, applied once by a person with owner
# rights on the environment's project: the APIs the build itself uses, the Terraform state bucket,
# the Artifact Registry repository its images live in, relayflow's own service accounts, the
# build's service account with exactly the roles the apply needs, in dev the test build's
# account (which holds nearly nothing), and the Cloud Build triggers.
#
# One environment per project: the build of an environment holds rights in its own project only
# (plus reading the images of the environment it promotes from), so it cannot touch another
# environment's resources or state.

locals {
  # serviceusage and cloudresourcemanager must already be on (the walkthrough enables them with
  # gcloud): Terraform needs them to enable anything and to read the project.
  services = [
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",
    "containeranalysis.googleapis.com",
    "iam.googleapis.com",
    # The Pub/Sub service agent is granted on the push account here (below).
    "pubsub.googleapis.com",
    "secretmanager.googleapis.com",
    "storage.googleapis.com",
  ]

  build_member = "serviceAccount:${google_service_account.build.email}"

  # relayflow's identities in this environment, created here rather than by the environment's
  # apply so that the build account is granted on each of them alone, never on every account
  # of the project: it acts as the ones its resources run or sign as and only reads the rest.
  # envs/<env> reads them (data sources), by these account ids.
  identities = {
    start-flow    = { account_id = "relayflow-start-flow", name = "relayflow start-flow", about = "Runtime identity of the Cloud Run service start-flow; holds only what start-flow needs." }
    worker        = { account_id = "relayflow-worker", name = "relayflow worker", about = "Runtime identity of the Cloud Run service worker; holds only what worker needs." }
    poller        = { account_id = "relayflow-poller", name = "relayflow poller", about = "Runtime identity of the Cloud Run service poller; holds only what poller needs." }
    api           = { account_id = "relayflow-api", name = "relayflow api", about = "Runtime identity of the Cloud Run service api; holds only what api needs." }
    tasks-invoker = { account_id = "relayflow-tasks", name = "relayflow Cloud Tasks invoker", about = "Identity in the OIDC token of every relayflow task; may invoke the worker and the poller, nothing else." }
    pubsub-push   = { account_id = "relayflow-pubsub-push", name = "relayflow Pub/Sub push", about = "Identity in the OIDC token of each message Pub/Sub pushes; may invoke start-flow (flow requests) and the api (signals), nothing else." }
    scheduler     = { account_id = "relayflow-scheduler", name = "relayflow sweeper schedule", about = "Identity in the OIDC token of the periodic POST /sweep; may invoke the worker, nothing else." }
  }
  # The Cloud Run services' identities: each creates tasks that carry the tasks-invoker's token.
  runtime = ["start-flow", "worker", "poller", "api"]
  # What the environment's apply makes Google run or sign as (iam.serviceAccounts.actAs): the
  # services' revisions, the push subscriptions' OIDC token, the sweeper job's OIDC token. It
  # never acts as the tasks-invoker (the services do, at run time): that one it only reads.
  acted_as  = concat(local.runtime, ["pubsub-push", "scheduler"])
  read_only = setsubtract(keys(local.identities), local.acted_as)

  # Exactly what `terraform apply` of envs/<env> does, role by role (project-wide because the
  # resources do not exist before the apply that creates them). Over service accounts the build
  # holds nothing project-wide: see build_acts_as and build_reads.
  build_roles = {
    # google_project_service: enable the APIs relayflow uses; google_project_service_identity.
    "roles/serviceusage.serviceUsageAdmin" = null
    # google_project_iam_member, limited by the condition below to the three project roles
    # relayflow grants; without it this role could grant anything, owner included.
    "roles/resourcemanager.projectIamAdmin" = {
      title      = "only relayflow's project roles"
      expression = "api.getAttribute('iam.googleapis.com/modifiedGrantsByRole', []).hasOnly(['roles/datastore.user', 'roles/cloudtrace.agent', 'roles/monitoring.metricWriter'])"
    }
    # Cloud Run services and their invoker/viewer grants.
    "roles/run.admin" = null
    # Topics, subscriptions and their grants.
    "roles/pubsub.admin" = null
    # Queues and their grants.
    "roles/cloudtasks.admin" = null
    # The sweeper's job.
    "roles/cloudscheduler.admin" = null
    # The Firestore database, composite indexes, TTL and index-exemption field settings.
    "roles/datastore.owner" = null
    # The offload bucket and its grants (creating a bucket takes storage.buckets.create, which
    # no narrower predefined role has); with CMEK on, reading the Cloud Storage service agent.
    "roles/storage.admin" = null
    # With CMEK on: the key rings, the keys and each key's grant to its service agent. It holds
    # no encrypt or decrypt right; it could schedule a key version's destruction, which takes
    # effect only after the key's destroy_scheduled_duration (30 days) and can be undone until then.
    "roles/cloudkms.admin" = null
    # Alert policies, the dashboard, and the metric descriptors the alerts need.
    "roles/monitoring.alertPolicyEditor" = null
    "roles/monitoring.dashboardEditor"   = null
    "roles/monitoring.metricWriter"      = null
    # Build logs: a build that runs as a user-specified account writes them itself.
    "roles/logging.logWriter" = null
    # The dev deploy waits for the test build of its commit and reads how it ended
    # (deploy/await-tests.sh); Cloud Build has no IAM below the project.
    "roles/cloudbuild.builds.viewer" = null
  }

  # Which account each trigger's builds run as: the deploying build account, or (dev's tests)
  # the test account, which can reach no state, image or deploy right.
  trigger_accounts = merge(
    { build = google_service_account.build.id },
    { for a in google_service_account.test : "test" => a.id },
  )

  repository_url = "${google_artifact_registry_repository.images.location}-docker.pkg.dev/${var.project_id}/${google_artifact_registry_repository.images.repository_id}"

  common_substitutions = {
    _ENV             = var.environment
    _REGION          = var.region
    _REPOSITORY      = google_artifact_registry_repository.images.repository_id
    _TF_STATE_BUCKET = google_storage_bucket.main.name
  }

  # dev builds and tests once per commit on the branch and deploys; staging promotes a digest
  # dev built and applies; prod promotes and plans, then applies the saved plan once approved.
  triggers = {
    dev = {
      # The tests and checkov, with hashed test tools, as the test account: nothing they install
      # can reach the build account's rights. Started by the same push as build, which waits
      # for it and pushes nothing unless it succeeded.
      test = {
        description = "Run the tests and the policy checks of a commit, as the test account (no deploy rights)."
        file        = "deploy/cloudbuild/test.yaml"
        on_push     = true
        approval    = false
        extra       = {}
        account     = "test"
      }
      build = {
        description = "Build and push the image once the commit's test build passed, then plan and apply dev with its digest."
        file        = "cloudbuild.yaml"
        on_push     = true
        approval    = false
        extra       = {}
        account     = "build"
      }
    }
    staging = {
      promote = {
        description = "Copy a digest built in dev into staging's repository, plan and apply staging."
        file        = "deploy/cloudbuild/promote.yaml"
        on_push     = false
        approval    = false
        extra       = { _SOURCE_REPOSITORY = var.upstream_repository, _IMAGE_DIGEST = "", _AUTO_APPLY = "true" }
        account     = "build"
      }
    }
    prod = {
      plan = {
        description = "Copy a digest staging ran into prod's repository and save a plan of prod."
        file        = "deploy/cloudbuild/promote.yaml"
        on_push     = false
        approval    = false
        extra       = { _SOURCE_REPOSITORY = var.upstream_repository, _IMAGE_DIGEST = "", _AUTO_APPLY = "false" }
        account     = "build"
      }
      apply = {
        description = "Apply a saved plan of prod, after a person approves it."
        file        = "deploy/cloudbuild/apply.yaml"
        on_push     = false
        approval    = true
        extra       = { _PLAN_BUILD_ID = "" }
        account     = "build"
      }
    }
  }
}

resource "google_project_service" "main" {
  for_each = toset(local.services)

  project            = var.project_id
  service            = each.value
  disable_on_destroy = false
}

# Terraform state of this environment (and the bootstrap's own, once migrated), the per-
# environment tfvars the build reads, and the saved plans prod applies.
resource "google_storage_bucket" "main" {
  # checkov:skip=CKV_GCP_62:Access logs of the state bucket would go to another bucket that needs the same care; Cloud Audit Logs (data access) cover who read or wrote state.
  # checkov:skip=CKV_GCP_78:False positive on older checkov versions: versioning is enabled below.
  project                     = var.project_id
  name                        = var.state_bucket_name
  location                    = var.state_bucket_location
  labels                      = merge(var.labels, { relayflow-env = var.environment })
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = false

  # Every state write is a new version: a bad apply can be rolled back by restoring one.
  versioning {
    enabled = true
  }

  lifecycle_rule {
    condition {
      num_newer_versions = var.state_versions_kept
      with_state         = "ARCHIVED"
    }
    action {
      type = "Delete"
    }
  }

  # Saved plans are applied within hours or not at all.
  lifecycle_rule {
    condition {
      age            = 7
      matches_prefix = ["plans/"]
    }
    action {
      type = "Delete"
    }
  }

  depends_on = [google_project_service.main]
}

# What environment this bucket (and so this project) holds. Every build reads it first and stops
# unless it names the build's own _ENV and project: a dev build submitted with _ENV=prod, or
# pointed at another environment's bucket, fails before Terraform reads any state.
resource "google_storage_bucket_object" "environment" {
  bucket       = google_storage_bucket.main.name
  name         = "relayflow/environment.json"
  content_type = "application/json"
  content      = jsonencode({ environment = var.environment, project_id = var.project_id })
}

resource "google_artifact_registry_repository" "images" {
  # checkov:skip=CKV_GCP_84:Google-managed encryption; images hold relayflow's code and its public dependencies, never flow data, which is what the environments' cmek option keys.
  project       = var.project_id
  location      = var.region
  repository_id = var.repository_id
  description   = "relayflow images of the ${var.environment} environment, by digest."
  format        = "DOCKER"
  labels        = var.labels

  # A tag names one digest for ever: the revision a tag was promoted as cannot change under it.
  docker_config {
    immutable_tags = true
  }

  cleanup_policy_dry_run = false

  cleanup_policies {
    id     = "keep-recent"
    action = "KEEP"
    most_recent_versions {
      keep_count = var.images_kept
    }
  }

  cleanup_policies {
    id     = "delete-old"
    action = "DELETE"
    condition {
      tag_state  = "ANY"
      older_than = "${var.image_max_age_days * 86400}s"
    }
  }

  depends_on = [google_project_service.main]
}

# --- The build's identity -----------------------------------------------------------------------

resource "google_service_account" "build" {
  project      = var.project_id
  account_id   = "relayflow-build"
  display_name = "relayflow build (${var.environment})"
  description  = "Runs the ${var.environment} Cloud Build triggers: holds what terraform apply of envs/${var.environment} needs in this project, and nothing elsewhere."

  depends_on = [google_project_service.main]
}

resource "google_project_iam_member" "build" {
  for_each = local.build_roles

  project = var.project_id
  role    = each.key
  member  = local.build_member

  dynamic "condition" {
    for_each = each.value == null ? [] : [each.value]
    content {
      title      = condition.value.title
      expression = condition.value.expression
    }
  }
}

# --- relayflow's identities ---------------------------------------------------------------------

resource "google_service_account" "relayflow" {
  for_each = local.identities

  project      = var.project_id
  account_id   = each.value.account_id
  display_name = each.value.name
  description  = each.value.about

  depends_on = [google_project_service.main]
}

# The build acts as these, each on its own (no project-wide serviceAccountUser): creating a Cloud
# Run revision, a push subscription or the sweeper job that runs or signs as it requires actAs.
resource "google_service_account_iam_member" "build_acts_as" {
  for_each = toset(local.acted_as)

  service_account_id = google_service_account.relayflow[each.key].name
  role               = "roles/iam.serviceAccountUser"
  member             = local.build_member
}

# The environment's apply reads the others (their email goes into the services' settings and
# invoker grants), nothing more.
resource "google_service_account_iam_member" "build_reads" {
  for_each = local.read_only

  service_account_id = google_service_account.relayflow[each.key].name
  role               = "roles/iam.serviceAccountViewer"
  member             = local.build_member
}

# Creating a task that carries an OIDC token for the tasks-invoker account requires actAs on it:
# every service enqueues tasks.
resource "google_service_account_iam_member" "tasks_invoker_user" {
  for_each = toset(local.runtime)

  service_account_id = google_service_account.relayflow["tasks-invoker"].name
  role               = "roles/iam.serviceAccountUser"
  member             = google_service_account.relayflow[each.key].member
}

# Pub/Sub's service agent mints the push OIDC token (projects created before April 2021 need the
# grant explicitly; it is harmless elsewhere). The agent is created on demand: this resource
# (google-beta only) makes it exist and names it.
resource "google_project_service_identity" "pubsub" {
  provider = google-beta

  project = var.project_id
  service = "pubsub.googleapis.com"

  depends_on = [google_project_service.main]
}

resource "google_service_account_iam_member" "pubsub_push_token_creator" {
  service_account_id = google_service_account.relayflow["pubsub-push"].name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = google_project_service_identity.pubsub.member
}

# --- The test build's identity (dev) --------------------------------------------------------------

# The tests install and run third-party test tools (hashed, but still other people's code): they
# run as an account that may write its build's logs and do nothing else, never as the build
# account that deploys.
resource "google_service_account" "test" {
  count = var.environment == "dev" ? 1 : 0

  project      = var.project_id
  account_id   = "relayflow-test"
  display_name = "relayflow tests (${var.environment})"
  description  = "Runs the relayflow-test trigger: the tests and policy checks of a commit. Writes its build logs; no state, image or deploy rights."

  depends_on = [google_project_service.main]
}

resource "google_project_iam_member" "test_logs" {
  for_each = { for a in google_service_account.test : "test" => a.member }

  project = var.project_id
  role    = "roles/logging.logWriter"
  member  = each.value
}

# State, tfvars and saved plans: this bucket only.
resource "google_storage_bucket_iam_member" "build_state" {
  bucket = google_storage_bucket.main.name
  role   = "roles/storage.objectAdmin"
  member = local.build_member
}

# Push (dev) or copy a promoted digest in (staging, prod): this repository only.
resource "google_artifact_registry_repository_iam_member" "build_writer" {
  project    = var.project_id
  location   = google_artifact_registry_repository.images.location
  repository = google_artifact_registry_repository.images.name
  role       = "roles/artifactregistry.writer"
  member     = local.build_member
}

# The next environment's build reads the digests it promotes from here, and their provenance.
resource "google_artifact_registry_repository_iam_member" "reader" {
  for_each = var.image_readers

  project    = var.project_id
  location   = google_artifact_registry_repository.images.location
  repository = google_artifact_registry_repository.images.name
  role       = "roles/artifactregistry.reader"
  member     = each.value
}

# Provenance is stored as Artifact Analysis occurrences, readable per project only.
resource "google_project_iam_member" "provenance_reader" {
  for_each = var.image_readers

  project = var.project_id
  role    = "roles/containeranalysis.occurrences.viewer"
  member  = each.value
}

# --- Triggers -------------------------------------------------------------------------------------

resource "google_cloudbuild_trigger" "main" {
  for_each = local.triggers[var.environment]

  project         = var.project_id
  location        = var.region
  name            = "relayflow-${each.key}"
  description     = each.value.description
  service_account = local.trigger_accounts[each.value.account]
  filename        = each.value.on_push ? each.value.file : null
  # The environment's names (its state bucket included) go to the deploying builds only.
  substitutions = merge(each.value.account == "build" ? local.common_substitutions : {}, each.value.extra)

  dynamic "repository_event_config" {
    for_each = each.value.on_push ? [1] : []
    content {
      repository = var.source_repository
      push {
        branch = var.branch
      }
    }
  }

  # Manual triggers (run with gcloud builds triggers run ... --substitutions=...) build the
  # branch's head with the config file named here.
  dynamic "source_to_build" {
    for_each = each.value.on_push ? [] : [1]
    content {
      repository = var.source_repository
      ref        = "refs/heads/${trim(var.branch, "^$")}"
      repo_type  = "GITHUB"
    }
  }

  dynamic "git_file_source" {
    for_each = each.value.on_push ? [] : [1]
    content {
      path       = each.value.file
      repository = var.source_repository
      revision   = "refs/heads/${trim(var.branch, "^$")}"
      repo_type  = "GITHUB"
    }
  }

  approval_config {
    approval_required = each.value.approval
  }

  # The build runs as its own account from its first run: every role must be in place.
  depends_on = [
    google_project_iam_member.build,
    google_service_account_iam_member.build_acts_as,
    google_service_account_iam_member.build_reads,
    google_storage_bucket_iam_member.build_state,
    google_artifact_registry_repository_iam_member.build_writer,
    google_project_iam_member.test_logs,
  ]
}
