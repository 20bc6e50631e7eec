"""Execution machinery, kept apart from stage logic: read-ahead tuning, threads."""
