"""The model registry: a SQLite store of models and saved serving profiles.

Layers: `store` (the database, versioned migrations, CRUD), `sources` (what a model source is:
format, quantization, size), `scan` (find GGUF files, HF model dirs and the HF cache), `profiles`
(a profile is the `kvspill serve` engine flags it maps to, validated against `EngineOptions`),
`hub_files` (which files of a Hub repo a model is), `pull` (download through huggingface_hub and
register; `ensure_local_model`), `cache_files` (free a pulled model's cache files).

Invariants: never imports torch; only `pull` touches the network, through huggingface_hub (every
other module looks an HF id up in the local cache only); the database lives in the user's data dir
unless `--data-dir` / `KVSPILL_DATA_DIR` says otherwise.
"""

from __future__ import annotations

from kvspill.registry.store import ModelEntry, Profile, Registry, default_data_dir, open_registry

__all__ = ["ModelEntry", "Profile", "Registry", "default_data_dir", "open_registry"]
