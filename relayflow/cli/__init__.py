"""The ``relayflow`` command and what it runs (the demo batch, the local stack)."""
