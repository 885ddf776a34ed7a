"""An example team app: order fulfilment on relayflow, written only against its public API."""
