"""The Google adapters: Firestore (store), Cloud Tasks (queue), Pub/Sub (events), OIDC (auth)."""
