# One Cloud Run (v2) service with its own service account. By default nothing outside the project
# reaches it (ingress internal-only), and whatever the ingress, the only principals allowed to
# invoke it are the ones passed in: Cloud Run checks run.invoker on every request.

# The account is the bootstrap's (infra/terraform/bootstrap): created there so that the build
# may act as it alone, not as every account of the project.
data "google_service_account" "main" {
  project    = var.project_id
  account_id = var.service_account_id
}

resource "google_cloud_run_v2_service" "main" {
  project     = var.project_id
  location    = var.location
  name        = var.name
  description = var.description
  labels      = var.labels

  # Internal-only still admits Cloud Tasks, Pub/Sub push, Eventarc and Cloud Scheduler from this
  # project (they count as internal traffic). The api may take INGRESS_TRAFFIC_ALL so that an
  # operator's `gcloud run services proxy` reaches it; IAM still refuses anyone not invited.
  ingress             = var.ingress
  custom_audiences    = var.custom_audiences
  deletion_protection = var.deletion_protection

  template {
    service_account                  = data.google_service_account.main.email
    timeout                          = "${var.request_timeout_s}s"
    max_instance_request_concurrency = var.max_concurrency

    scaling {
      min_instance_count = var.min_instances
      max_instance_count = var.max_instances
    }

    containers {
      image = var.image

      dynamic "env" {
        for_each = var.env
        content {
          name  = env.key
          value = env.value
        }
      }

      resources {
        limits = {
          cpu    = var.cpu
          memory = var.memory
        }
        # CPU only while serving a request: every handler here is request-scoped (no worker
        # sleeps or runs in the background, DESIGN invariant 1).
        cpu_idle = true
      }
    }
  }
}

# Keys are static labels so that for_each is known at plan time even when the members (service
# account emails) are not.
resource "google_cloud_run_v2_service_iam_member" "invoker" {
  for_each = var.invoker_members

  project  = google_cloud_run_v2_service.main.project
  location = google_cloud_run_v2_service.main.location
  name     = google_cloud_run_v2_service.main.name
  role     = "roles/run.invoker"
  member   = each.value
}

# `gcloud run services proxy` reads the service (its URL) before it forwards requests: people who
# invoke the service through the proxy also need run.services.get on it, and nothing more.
resource "google_cloud_run_v2_service_iam_member" "viewer" {
  for_each = var.viewer_members

  project  = google_cloud_run_v2_service.main.project
  location = google_cloud_run_v2_service.main.location
  name     = google_cloud_run_v2_service.main.name
  role     = "roles/run.viewer"
  member   = each.value
}
