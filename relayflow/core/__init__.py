"""The core: flow definitions, the state machine, the pure planner and the engine.

Nothing here talks to Google: the engine works through the protocols in ``ports``.
"""
