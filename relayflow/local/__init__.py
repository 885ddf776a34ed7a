"""The local stack: the official emulators, ours, and relayflow's own services on 127.0.0.1.

``relayflow local up | down | status`` (commands.py) drives a :class:`stack.Stack`; tests build
one directly (another base port, a tmp state dir, a subset of components). Modules: ports
(the port block), components (command lines and health probes), processes (process groups),
health, provision (topology -> emulators), clients, statefile, environment, polling.
"""
