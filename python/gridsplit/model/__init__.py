"""gridsplit.model (package root)."""
