"""Fake dependencies of the example orders app: inventory, payments, shipping, notifications."""
