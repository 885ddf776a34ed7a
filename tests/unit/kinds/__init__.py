"""Tests of the kinds' transitions (relayflow.core.kinds), one module per kind."""
