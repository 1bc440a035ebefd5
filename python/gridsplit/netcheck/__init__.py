"""gridsplit.netcheck (package root)."""
