# What one environment needs before its first build can run, applied once by a person with owner
# rights on the environment's project: the APIs the build itself uses, the Terraform state bucket,
# the Artifact Registry repository its images live in, the build's own service account with
# exactly the roles the apply needs, and the Cloud Build triggers.
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
    "secretmanager.googleapis.com",
    "storage.googleapis.com",
  ]

  build_member = "serviceAccount:${google_service_account.build.email}"

  # The two roles over service accounts, granted apart (see build_service_accounts).
  service_account_roles = ["roles/iam.serviceAccountAdmin", "roles/iam.serviceAccountUser"]

  # Exactly what `terraform apply` of envs/<env> does, role by role (project-wide because the
  # resources do not exist before the apply that creates them).
  build_roles = {
    # google_project_service: enable the APIs relayflow uses; google_project_service_identity.
    "roles/serviceusage.serviceUsageAdmin" = null
    # relayflow's seven service accounts, and the IAM on the tasks-invoker and push accounts.
    "roles/iam.serviceAccountAdmin" = null
    # actAs the runtime accounts (Cloud Run revisions), the push account (subscription OIDC) and
    # the scheduler account (job OIDC): creating those resources requires it.
    "roles/iam.serviceAccountUser" = null
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
    # Alert policies, the dashboard, and the metric descriptors the alerts need.
    "roles/monitoring.alertPolicyEditor" = null
    "roles/monitoring.dashboardEditor"   = null
    "roles/monitoring.metricWriter"      = null
    # Build logs: a build that runs as a user-specified account writes them itself.
    "roles/logging.logWriter" = null
  }

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
      build = {
        description = "Test, build and push the image once, then plan and apply dev with its digest."
        file        = "cloudbuild.yaml"
        on_push     = true
        approval    = false
        extra       = {}
      }
    }
    staging = {
      promote = {
        description = "Copy a digest built in dev into staging's repository, plan and apply staging."
        file        = "deploy/cloudbuild/promote.yaml"
        on_push     = false
        approval    = false
        extra       = { _SOURCE_REPOSITORY = var.upstream_repository, _IMAGE_DIGEST = "", _AUTO_APPLY = "true" }
      }
    }
    prod = {
      plan = {
        description = "Copy a digest staging ran into prod's repository and save a plan of prod."
        file        = "deploy/cloudbuild/promote.yaml"
        on_push     = false
        approval    = false
        extra       = { _SOURCE_REPOSITORY = var.upstream_repository, _IMAGE_DIGEST = "", _AUTO_APPLY = "false" }
      }
      apply = {
        description = "Apply a saved plan of prod, after a person approves it."
        file        = "deploy/cloudbuild/apply.yaml"
        on_push     = false
        approval    = true
        extra       = { _PLAN_BUILD_ID = "" }
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
  # checkov:skip=CKV_GCP_84:Google-managed encryption; images hold relayflow's code and its public dependencies only, and no CMEK key ring is part of this deployment.
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
  for_each = { for role, condition in local.build_roles : role => condition if !contains(local.service_account_roles, role) }

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

# Apart, so that the two policy exceptions below cover these two roles and nothing else.
resource "google_project_iam_member" "build_service_accounts" {
  # checkov:skip=CKV_GCP_41:The accounts the build must actAs (runtime, push, scheduler) are created by the apply itself, so no narrower resource exists to grant on beforehand; the project holds one environment and nothing else.
  # checkov:skip=CKV_GCP_49:Same reason: the build creates relayflow's service accounts and sets IAM on two of them; only this environment's build account holds the role.
  for_each = toset(local.service_account_roles)

  project = var.project_id
  role    = each.value
  member  = local.build_member
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
  service_account = google_service_account.build.id
  filename        = each.value.on_push ? each.value.file : null
  substitutions   = merge(local.common_substitutions, each.value.extra)

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
    google_project_iam_member.build_service_accounts,
    google_storage_bucket_iam_member.build_state,
    google_artifact_registry_repository_iam_member.build_writer,
  ]
}
