"""The model registry: a SQLite store of models and saved serving profiles.

Layers: `store` (the database, versioned migrations, CRUD), `sources` (what a model source is:
format, quantization, size), `scan` (find GGUF files, HF model dirs and the HF cache), `profiles`
(a profile is the `kvspill serve` engine flags it maps to, validated against `EngineOptions`).

Invariants: never imports torch; never touches the network (an HF id is only looked up in the
local cache); the database lives in the user's data dir unless `--data-dir` / `KVSPILL_DATA_DIR`
says otherwise.
"""

from __future__ import annotations

from kvspill.registry.store import ModelEntry, Profile, Registry, default_data_dir, open_registry

__all__ = ["ModelEntry", "Profile", "Registry", "default_data_dir", "open_registry"]
