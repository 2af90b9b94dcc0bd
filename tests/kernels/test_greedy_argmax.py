"""kernels/greedy_argmax.widen_and_argmax: torch.argmax of the widened logits, ties to the lowest
id within and across chunks, NaN as the largest logit, the arrival counters left at 0 (a graph
replays the launch), and the sampler's CUDA entry points on it."""

from __future__ import annotations

import pytest
import torch

from kvspill.kernels.greedy_argmax import CHUNK, widen_and_argmax


def _logits(rows: int, vocab: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn((rows, vocab), generator=gen) * 4).to(dtype)
    logits[1 % rows, [5, vocab - 1]] = 60.0  # a tie across chunks: the first wins
    logits[2 % rows, [CHUNK + 1, CHUNK + 2]] = 60.0  # a tie inside one chunk
    logits[3 % rows, -1] = 60.0  # the maximum in the partial last chunk
    logits[4 % rows] = -1.5  # a row all equal: token 0
    return logits


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("vocab", [2 * CHUNK + 77, 3 * CHUNK])
def test_widen_and_argmax_equals_torch_with_ties_to_the_lowest_id(device, dtype, vocab):
    logits = _logits(6, vocab, dtype, seed=vocab).to(device)
    counters = torch.zeros(8, dtype=torch.int32, device=device)
    wide, ids = widen_and_argmax(logits, counters)
    assert wide.dtype == torch.float32 and torch.equal(wide, logits.float())
    assert (wide is logits) == (dtype == torch.float32)  # fp32 logits are not copied
    assert ids.dtype == torch.int64 and torch.equal(ids, logits.float().argmax(dim=-1))
    assert ids[1:5].tolist() == [5, CHUNK + 1, vocab - 1, 0]
    assert counters.tolist() == [0] * 8  # left as found: the next launch (a graph replay) counts anew
    _, again = widen_and_argmax(logits.flip(0).contiguous(), counters)
    assert torch.equal(again, ids.flip(0))


def test_a_nan_logit_is_the_largest_as_in_torch(device):
    logits = _logits(3, CHUNK + 9, torch.bfloat16, seed=1).to(device)
    logits[0, CHUNK + 3] = float("nan")
    logits[2, [7, 900]] = float("nan")
    _, ids = widen_and_argmax(logits)
    assert ids.tolist() == [CHUNK + 3, logits[1].float().argmax().item(), 7]
    assert torch.equal(ids, logits.float().argmax(dim=-1))


def test_one_row_and_none(device):
    logits = torch.full((1, 40), -2.0, device=device, dtype=torch.bfloat16)
    logits[0, 33] = 1.0
    assert widen_and_argmax(logits)[1].tolist() == [33]
    wide, ids = widen_and_argmax(torch.empty((0, 40), device=device, dtype=torch.bfloat16))
    assert wide.shape == (0, 40) and ids.shape == (0,)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the sampler takes the kernel on CUDA only")
def test_the_samplers_cuda_paths_take_the_kernel():
    from kvspill.sampling.sampler import greedy_argmax, widen_and_greedy

    logits = _logits(5, 128256, torch.bfloat16, seed=3).cuda()
    wide, ids = widen_and_greedy(logits)
    assert torch.equal(wide, logits.float()) and torch.equal(ids, logits.float().argmax(dim=-1))
    assert torch.equal(greedy_argmax(wide), ids)
