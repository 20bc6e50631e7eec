"""Data sources: random-access readers that a pipeline or DataLoader starts from."""
