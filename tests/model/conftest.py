"""Helpers for model tests: a dense causal AttentionFn, HF references loaded once per session."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from kvspill.env import env_settings
from kvspill.model.base import AttentionFn


class DenseCausalAttention:
    """Causal SDPA (with GQA) over flattened sequences of `seq_lens` tokens; no cache.

    The same call HF's sdpa path makes ([1, heads, tokens, head_dim], enable_gqa), so float32
    results match HF to the last bit for one sequence.
    """

    def __init__(self, seq_lens: Sequence[int]) -> None:
        self.seq_lens = list(seq_lens)
        self.layers_seen: list[int] = []

    def __call__(self, layer_idx: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        # q: [num_tokens, num_heads, head_dim]; k, v: [num_tokens, num_kv_heads, head_dim]
        assert q.shape[0] == sum(self.seq_lens)
        self.layers_seen.append(layer_idx)
        outs = []
        for qs, ks, vs in zip(
            q.split(self.seq_lens), k.split(self.seq_lens), v.split(self.seq_lens), strict=True
        ):
            o = F.scaled_dot_product_attention(
                qs.transpose(0, 1)[None],
                ks.transpose(0, 1)[None],
                vs.transpose(0, 1)[None],
                is_causal=True,
                enable_gqa=True,
            )  # [1, num_heads, seq_len, head_dim]
            outs.append(o[0].transpose(0, 1))
        return torch.cat(outs)  # [num_tokens, num_heads, head_dim]


@pytest.fixture
def dense_attention() -> Callable[[Sequence[int]], AttentionFn]:
    return DenseCausalAttention


def run_logits(model: torch.nn.Module, seqs: Sequence[Sequence[int]]) -> Tensor:
    """Logits [total_tokens, vocab] of our model for the flattened batch `seqs`."""
    ids = torch.tensor([t for s in seqs for t in s], dtype=torch.long)
    positions = torch.cat([torch.arange(len(s)) for s in seqs])
    with torch.inference_mode():
        hidden = model(ids, positions, DenseCausalAttention([len(s) for s in seqs]))
        return model.compute_logits(hidden)


def hf_logits(hf_model: torch.nn.Module, seq: Sequence[int]) -> Tensor:
    with torch.inference_mode():
        return hf_model(torch.tensor([list(seq)])).logits[0].float()


@pytest.fixture
def logits_of() -> Callable[..., Tensor]:
    return run_logits


@pytest.fixture
def hf_logits_of() -> Callable[..., Tensor]:
    return hf_logits


@pytest.fixture(scope="session")
def smollm2_loaded(smollm2_gguf_path: Path):  # -> LoadedModel
    from kvspill.model.loader import load_model
    from kvspill.model.resolve import resolve_model

    return load_model(resolve_model(None), torch.device("cpu"), torch.float32)


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_gguf_path: Path):  # -> TokenizerBundle
    from kvspill.model.resolve import resolve_model
    from kvspill.text.tokenizer import load_tokenizer

    return load_tokenizer(resolve_model(None))


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty GGUF cache (KVSPILL_GGUF_CACHE) for this test."""
    root = tmp_path / "gguf-cache"
    monkeypatch.setenv("KVSPILL_GGUF_CACHE", str(root))
    env_settings.cache_clear()
    yield root
    env_settings.cache_clear()
