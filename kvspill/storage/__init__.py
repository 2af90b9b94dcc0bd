"""The bytes of the KV tiers (torch): block layout, the pools, pinned host memory, the disk
file, persisted prefixes, block transfers."""
