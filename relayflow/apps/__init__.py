"""Apps that ship with relayflow; each is loaded through ``RELAYFLOW_APP`` like a team's own."""
