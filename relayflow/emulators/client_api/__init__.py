"""A fake client API (the "registration" service the reference flow talks to), with faults."""
