"""Tests of relayflow.core.planner, one module per module of it."""
