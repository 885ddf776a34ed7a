"""The Cloud Run services' WSGI entry points:
``relayflow.services.{worker,poller,api}.main:app``."""
