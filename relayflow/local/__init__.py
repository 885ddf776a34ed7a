"""The local stack: the official emulators, ours, and relayflow's own services on 127.0.0.1."""
