"""The DataLoader API: records, sharding, samplers and the loader itself."""
