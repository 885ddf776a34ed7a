"""The HTTP surfaces: the task receivers (worker, poller) and the operator api."""
