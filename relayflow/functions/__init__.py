"""The start function's source: functions-framework's ``--source`` is
``relayflow/functions/start_flow/main.py``."""
