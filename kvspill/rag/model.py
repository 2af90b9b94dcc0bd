"""A sentence-transformers model directory, run with transformers: mean pooling, unit length.

Why not sentence-transformers itself: the package brings scipy and scikit-learn along for
training features a server does not use; transformers is already a kvspill dependency, and
mean pooling plus normalisation is all that all-MiniLM-L6-v2's `modules.json` asks for (the
tests check the result against sentence-transformers' own `encode`, cosine >= 0.999).

Invariants:
- Nothing is downloaded: the directory is read with `local_files_only=True`.
- The pooling the directory declares (`1_Pooling/config.json`) is honoured for mean and CLS
  pooling; any other mode is refused at load rather than run wrongly. Vectors are normalised
  when `modules.json` lists a Normalize module.
- Inputs longer than `max_seq_length` (sentence_bert_config.json) are truncated, as
  sentence-transformers does.
- Batches are sorted by length (less padding); one forward at a time (`_lock`), each one using
  torch's intra-op threads (`num_threads`, default: torch's, one per core).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch

from kvspill.errors import UnsupportedModelError

# packaged_model_dir and PACKAGED_MODEL stay importable from here (kvspill.bench.rag_bench).
from kvspill.rag.model_dir import PACKAGED_MODEL, packaged_model_dir, resolve_model_dir

__all__ = [
    "PACKAGED_MODEL",
    "TransformersEmbedder",
    "load_embedder",
    "packaged_model_dir",
    "resolve_model_dir",
]

BATCH_SIZE = 32


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def _pooling_mode(model_dir: Path) -> str:
    config = _read_json(model_dir / "1_Pooling" / "config.json")
    modes = [k for k, v in config.items() if k.startswith("pooling_mode_") and v]
    mode = modes[0].removeprefix("pooling_mode_") if len(modes) == 1 else ("mean_tokens" if not modes else "")
    if mode not in {"mean_tokens", "cls_token"}:
        raise UnsupportedModelError(
            f"{model_dir}: pooling {modes} is not supported (mean or CLS pooling only)"
        )
    return mode


def _special_tokens_around(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after a text's own ([CLS] and [SEP] for BERT)."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a")["input_ids"]
    at = next(i for i in range(len(full)) if full[i : i + len(plain)] == plain)
    return list(full[:at]), list(full[at + len(plain) :])


class TransformersEmbedder:
    """The `Embedder` (kvspill.rag.types) of a local sentence-transformers directory."""

    def __init__(self, model_dir: Path, name: str, num_threads: int | None = None) -> None:
        from transformers import AutoModel, AutoTokenizer

        modules = (
            json.loads((model_dir / "modules.json").read_text())
            if (model_dir / "modules.json").is_file()
            else []
        )
        self.normalize = any(m.get("type", "").endswith("Normalize") for m in modules) or not modules
        self.pooling = _pooling_mode(model_dir)
        st_config = _read_json(model_dir / "sentence_bert_config.json")
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        self.model = AutoModel.from_pretrained(
            str(model_dir), local_files_only=True, dtype=torch.float32
        ).eval()
        self.name = name
        self.dim = int(self.model.config.hidden_size)
        self.max_seq_length = int(
            st_config.get("max_seq_length") or min(self.tokenizer.model_max_length, 512)
        )
        self.vocab_size = int(self.tokenizer.vocab_size)
        self._prefix, self._suffix = _special_tokens_around(self.tokenizer)
        self.num_threads = num_threads
        self._lock = threading.Lock()

    def count_tokens(self, texts: list[str]) -> list[int]:
        batch = self.tokenizer(texts, truncation=True, max_length=self.max_seq_length)
        return [len(ids) for ids in batch["input_ids"]]

    def encode(self, texts: list[str]) -> np.ndarray:
        batch = self.tokenizer(texts, truncation=True, max_length=self.max_seq_length)
        return self._embed_inputs(batch["input_ids"])

    def encode_ids(self, token_ids: list[list[int]]) -> np.ndarray:
        """Token ids without special tokens: the model's own ([CLS] ... [SEP]) are added here,
        after truncation to `max_seq_length`, as the tokenizer does for text."""
        keep = self.max_seq_length - len(self._prefix) - len(self._suffix)
        return self._embed_inputs([[*self._prefix, *ids[:keep], *self._suffix] for ids in token_ids])

    def _embed_inputs(self, inputs: list[list[int]]) -> np.ndarray:
        out = np.empty((len(inputs), self.dim), dtype=np.float32)
        order = sorted(range(len(inputs)), key=lambda i: len(inputs[i]))
        for start in range(0, len(order), BATCH_SIZE):
            rows = order[start : start + BATCH_SIZE]
            out[rows] = self._forward([inputs[i] for i in rows])
        return out

    def _forward(self, batch: list[list[int]]) -> np.ndarray:
        width = max(len(ids) for ids in batch)
        pad = self.tokenizer.pad_token_id or 0
        input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids in batch])
        mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids in batch])
        with self._lock, torch.inference_mode():
            if self.num_threads is not None:
                torch.set_num_threads(self.num_threads)
            hidden = self.model(input_ids=input_ids, attention_mask=mask).last_hidden_state  # [B, S, D]
            if self.pooling == "cls_token":
                pooled = hidden[:, 0]
            else:
                weights = mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            if self.normalize:
                pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return pooled.numpy()


def load_embedder(name: str | None = None, num_threads: int | None = None) -> TransformersEmbedder:
    """The embedder for --embedding-model `name` (None: the packaged all-MiniLM-L6-v2)."""
    model_dir, served = resolve_model_dir(name)
    return TransformersEmbedder(model_dir, served, num_threads)
