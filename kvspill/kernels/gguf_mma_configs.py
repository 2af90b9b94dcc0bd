"""Which config the tensor-core quantized kernel (kernels/gguf_mma.py) runs a call with: the
config's fields, the measured table per (type, token count), a tuned table from a file
(KVSPILL_MMA_CONFIGS), and the config as it runs on one weight's shape (`for_shape`).

Invariant: `mma_config` returns a config only for a type, token count and row alignment the
kernel takes; its split_k is the one the launch uses (sb_per_split resolved to 0).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from kvspill.kernels.gguf_formats import QuantizedWeight
from kvspill.kernels.triton_compat import triton

MMA_MAX_TOKENS = 64
MMA_TYPES = ("Q4_K", "Q5_K", "Q6_K", "Q4_1")
# The types with a words form (Q5_K runs the sub-block and whole forms).
WORDS_TYPES = ("Q4_K", "Q6_K")
# The types with a whole-super-block form (Q4_1 runs the sub-block form only).
WHOLE_TYPES = ("Q4_K", "Q5_K", "Q6_K")
# A config's split_k applies to weights of at most this many rows (an 8B's qkv, o and down): with
# more, the row tiles alone fill the card and a split only adds the atomics.
SPLIT_K_MAX_ROWS = 8192
# MMA_CONFIGS' token counts: a call's count rounded up to a power of two.
MMA_TOKEN_KEYS = (2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class MmaConfig:
    block_n: int  # weight rows per program
    num_warps: int
    # Programs per row tile along K (> 1: partial sums, added in order by the words form, by fp32
    # atomics in the others); see SPLIT_K_MAX_ROWS. With sb_per_split, the most it may be.
    split_k: int = 1
    num_stages: int = 1
    magic: bool = False  # sub-block form: quants become 128 + q by a mantissa OR, not a convert
    # Each super-block's [block_n, 256] weights dequantized in registers (rounded to x's dtype),
    # then one K = 256 dot (Q6_K: 2 of 128), instead of K = 32 (16) dots with the scales after.
    whole: bool = False
    # Quants read as whole words (Q4_K: int32; Q6_K: halfwords), dequantized in registers (half
    # x: by magic-number asm) into planes, each one dot against x permuted to match (`words_x`).
    words: bool = False
    # > 0: split K by the weight's depth (`for_shape`): about this many super-blocks a program,
    # the split a power of two, at most split_k. 0: split_k as it is.
    sb_per_split: int = 0
    # The words form's planes alternate between two accumulators: two independent mma chains a
    # super-block instead of one.
    two_acc: bool = False
    # The split of weights past SPLIT_K_MAX_ROWS (an 8B's gate_up and lm_head): 1 but where a
    # measured token count gained from more.
    wide_split_k: int = 1

    def __post_init__(self) -> None:
        def power_of_two(v: object, low: int) -> bool:
            return type(v) is int and v >= low and v & (v - 1) == 0

        ok = power_of_two(self.block_n, 16) and power_of_two(self.num_warps, 1)
        ok = ok and type(self.split_k) is int and self.split_k >= 1
        ok = ok and type(self.num_stages) is int and self.num_stages >= 1
        ok = ok and type(self.sb_per_split) is int and self.sb_per_split >= 0
        ok = ok and type(self.wide_split_k) is int and self.wide_split_k >= 1
        flags = (self.magic, self.whole, self.words, self.two_acc)
        ok = ok and all(isinstance(f, bool) for f in flags) and not (self.whole and self.words)
        ok = ok and (self.words or not self.two_acc)
        if not ok:
            raise ValueError(
                f"{self}: block_n a power of two >= 16, num_warps a power of two, split_k and "
                "num_stages integers >= 1, sb_per_split an integer >= 0, wide_split_k >= 1, magic, whole, words and "
                "two_acc true or false (not whole and words; two_acc only with words)"
            )


# Per type: the byte alignment the kernel needs of each weight row (Q4_K's and Q5_K's headers are read as words).
ROW_ALIGN = {"Q4_K": 4, "Q5_K": 4, "Q6_K": 2, "Q4_1": 4}


def rows_aligned(weight: QuantizedWeight) -> bool:
    """Whether `weight`'s rows meet its type's ROW_ALIGN (data pointer and row stride)."""
    align = ROW_ALIGN[weight.qtype]
    return weight.data.data_ptr() % align == 0 and weight.data.stride(0) % align == 0


# Per (type, token count rounded up to a power of two): the config measured fastest on the
# Llama-3.1-8B shapes where it beat the other paths. The words form (2026-12-03,
# bench/results/2026-12-03-h200-q4k-words/) took Q4_K at 3-32 tokens and Q6_K at 5-32 from the
# sub-block form and dequantize-then-GEMM (8 tokens, the 5 shapes: Q4_K 288 us against 410, Q6_K
# 552 against 910). Split K by depth (sb_per_split; bench/results/2026-12-03-h200-mma-split-depth/):
# Q4_K about 4 super-blocks a program, Q6_K one; no split past SPLIT_K_MAX_ROWS.
# Two warps (`_SYNC`): Triton runs the dots as mma.sync, which the warps issue and go on (its
# wgmma, 4 warps, waited for each K = 32 dot), with 8-token tiles (`gguf_mma.mma_t_pad`); the loop
# is 520 SASS instructions per 128 weights a thread against 632 (sm_90). The step's quantized
# weights of random Llama-3.1-8B Q4_K_M at 8 tokens 4.24 -> 3.49 ms, 4 tokens 4.01 -> 3.40 (Q6_K
# there from its lane GEMV); at 16 Q4_K keeps wgmma (equal in the engine), at 32 wgmma wins Q4_K
# and 64 rows on two warps Q6_K. Decode of 8 / 16 / 32 x 2K: 1,479 / 2,623 / 3,425 -> 1,729 /
# 2,659 / 3,539 tok/s in all (H200, 2026-12-03, bench/results/2026-12-03-h200-mma-sync/).
# Q4_K with two accumulator chains (`two_acc`), Q6_K with two pipeline stages, and Q4_K's gate_up
# (past SPLIT_K_MAX_ROWS) split in two at 17-32 tokens: the step's quantized weights, shape by
# shape, 3.55 -> 3.45 ms at 8 tokens and 5.63 -> 5.11 at 32 (the 128K-row Q6_K lm_head 284 -> 257
# and 486 -> 341 us; two_acc on Q6_K at 32 tokens lost: down 57 -> 89 us); decode of 8 / 32 x 2K
# 1,720 -> 1,741 / 3,531 -> 3,741 tok/s in all. At 9-16 tokens (4-warp wgmma for Q4_K, not timed
# per shape) the engine's 16 x 2K lost 6%, so those entries keep their old configs (H200,
# 2026-12-03, bench/results/2026-12-03-h200-mma-two-acc/).
_WORDS = MmaConfig(block_n=64, num_warps=4, split_k=16, num_stages=3, words=True, sb_per_split=4)
_SYNC = MmaConfig(block_n=32, num_warps=2, split_k=8, num_stages=3, words=True, sb_per_split=4)
_SYNC_Q6K = replace(_SYNC, split_k=16, sb_per_split=1, num_stages=2)
MMA_CONFIGS: dict[tuple[str, int], MmaConfig] = {
    ("Q4_K", 4): replace(_SYNC, two_acc=True),
    ("Q4_K", 8): replace(_SYNC, two_acc=True),
    ("Q4_K", 16): _WORDS,
    ("Q4_K", 32): replace(_WORDS, split_k=8, two_acc=True, wide_split_k=2),
    ("Q6_K", 4): _SYNC_Q6K,
    ("Q6_K", 8): _SYNC_Q6K,
    # 9-16 tokens: re-swept once the words form read its scales in one load (`mma_sweep --types
    # Q6_K --forms words`): random 8B Q4_K_M 16 x 2K 5.654 / 5.655 -> 5.542 / 5.539 ms a step
    # (-2.0%); the sweep's pick at 32 tokens (this one) was 0.2% slower there, at 8 none beat the
    # table (H100, 2026-12-06, bench/results/2026-12-06-q6k-resweep).
    ("Q6_K", 16): replace(_WORDS, split_k=8, num_stages=2, sb_per_split=0, two_acc=True),
    ("Q6_K", 32): replace(_SYNC_Q6K, block_n=64, split_k=8),
    # Q5_K (Q5_K_M files' main type) at 2-32 tokens: the sub-block form with the Q4_K picks of
    # before the words form, against the dot kernel on the 8B shapes 1.6-2.3x, random 8B Q5_K at
    # 8 x 2K 616.7 -> 1,165.4 tok/s in all (H100, 2026-12-05, bench/results/2026-12-05-h100-merge-defaults,
    # call 2). `mma_sweep --types Q5_K --forms sub` picked the same config at 4 / 16 / 32 tokens
    # (the 8B shapes 873 -> 423, 847 -> 531, 1,410 -> 738 us against the dot kernel /
    # dequantize-then-GEMM): 4 / 16 / 32 x 2K 345.2 -> 628.4, 1,135.8 -> 1,788.0, 1,786.1 -> 2,494.8
    # tok/s in all (H100, bench/results/2026-12-05-h200-q41-configs, calls 17-18); at 2 tokens the
    # same config, against the dot kernel, 2 x 2K 176.8 -> 327.2 (call 20).
    **{
        ("Q5_K", n): MmaConfig(block_n=32, num_warps=2, split_k=4, num_stages=3, magic=True)
        for n in (2, 4, 8, 16, 32)
    },
    # Q4_1 (GGUF Q4_1 files; AWQ / GPTQ checkpoints load as Q4_1) at 2-32 tokens: the sub-block
    # form (`mma_sweep --types Q4_1 --forms sub`), the 8B shapes' sum against the dot kernel /
    # dequantize-then-GEMM they took: 4 tokens 949.5 -> 620.7 us, 8 944.2 -> 665.3, 16 901.4 ->
    # 723.5, 32 1,343.3 -> 994.6; random 8B Q4_1 8 x 2K 592.9 -> 728.0 tok/s in all, 32 x 2K
    # 1,862.2 -> 1,976.5 (H100, 2026-12-05, bench/results/2026-12-05-h200-q41-configs, call 14); 2
    # tokens with 4's config, 2 x 2K 172.0 -> 246.2 (call 20).
    # Where x is bf16 / fp16, Q4_1's 2-4 tokens and Q5_K's 2 take the lane passes before these
    # entries (gguf_gemv.LANE_PASSES_MAX_TOKENS: 2.42 / 1.41 / 1.75x them, H100,
    # bench/results/2026-12-05-h200-q41-configs, calls 22-23); they serve fp32 x and
    # KVSPILL_LANE_PASSES=0.
    ("Q4_1", 2): MmaConfig(block_n=64, num_warps=4, split_k=4, num_stages=3),
    ("Q4_1", 4): MmaConfig(block_n=64, num_warps=4, split_k=4, num_stages=3),
    ("Q4_1", 8): MmaConfig(block_n=128, num_warps=4, split_k=4, num_stages=3, magic=True),
    ("Q4_1", 16): MmaConfig(block_n=64, num_warps=4, split_k=4, num_stages=3, magic=True),
    ("Q4_1", 32): MmaConfig(block_n=128, num_warps=4, split_k=4, num_stages=3, magic=True),
}
# A JSON file of configs tuned on this machine (`python -m kvspill.bench.mma_sweep` writes one):
# {"Q6_K,16": {"block_n": 64, "num_warps": 2, ...}, "Q4_K,4": null, ...}; null sends that count
# back to its old path. Read once, at import.
MMA_CONFIGS_ENV = "KVSPILL_MMA_CONFIGS"


def parse_mma_configs(text: str, source: str) -> dict[tuple[str, int], MmaConfig | None]:
    """The entries of a tuned-configs JSON (see MMA_CONFIGS_ENV); ValueError says what is wrong."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{source}: not JSON ({e})") from e
    if not isinstance(raw, dict):
        raise ValueError(f'{source}: expected an object like {{"Q4_K,8": {{"block_n": 32, ...}}}}')
    entries: dict[tuple[str, int], MmaConfig | None] = {}
    for key, fields in raw.items():
        qtype, _, count = str(key).partition(",")
        if qtype not in MMA_TYPES or not count.isdigit() or int(count) not in MMA_TOKEN_KEYS:
            raise ValueError(
                f"{source}: key {key!r} must be TYPE,TOKENS with TYPE in {MMA_TYPES} and TOKENS 2..64, a power of two"
            )
        try:
            entries[(qtype, int(count))] = None if fields is None else MmaConfig(**fields)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{source}: {key}: {e}") from e
        config = entries[(qtype, int(count))]
        if config is not None and config.words and qtype not in WORDS_TYPES:
            raise ValueError(
                f"{source}: {key}: {qtype} has no words form (set words false: the sub-block form)"
            )
        if config is not None and config.whole and qtype not in WHOLE_TYPES:
            raise ValueError(
                f"{source}: {key}: {qtype} has no whole form (set whole false: the sub-block form)"
            )
    return entries


def _tuned_configs() -> None:
    path = os.environ.get(MMA_CONFIGS_ENV)
    if not path:
        return
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ValueError(f"{MMA_CONFIGS_ENV}={path}: {e.strerror}") from e
    for key, config in parse_mma_configs(text, f"{MMA_CONFIGS_ENV}={path}").items():
        if config is None:
            MMA_CONFIGS.pop(key, None)
        else:
            MMA_CONFIGS[key] = config


_tuned_configs()


def mma_config(weight: QuantizedWeight, num_tokens: int) -> MmaConfig | None:
    """The config `quant_linear` runs `num_tokens` tokens of `weight` with, or None: that count
    takes another path."""
    if weight.qtype not in MMA_TYPES or not 2 <= num_tokens <= MMA_MAX_TOKENS:
        return None
    if not rows_aligned(weight) or weight.in_features % 256:  # Q4_1: 32-weight blocks, any count
        return None
    config = MMA_CONFIGS.get((weight.qtype, triton.next_power_of_2(num_tokens)))
    return None if config is None else for_shape(config, weight.out_features, weight.in_features)


def for_shape(config: MmaConfig, rows: int, in_features: int) -> MmaConfig:
    """`config` as it runs on a [rows, in_features] weight: past SPLIT_K_MAX_ROWS rows its
    wide_split_k; with sb_per_split, split K to about that many super-blocks a program (a power
    of two, at most config.split_k); never more splits than super-blocks (no empty program)."""
    super_blocks = max(in_features // 256, 1)
    most = 1 << (super_blocks.bit_length() - 1)
    if rows > SPLIT_K_MAX_ROWS:
        return replace(config, split_k=min(config.wide_split_k, most), sb_per_split=0)
    if config.sb_per_split == 0:
        return config
    splits = triton.next_power_of_2(triton.cdiv(super_blocks, config.sb_per_split))
    return replace(config, split_k=min(splits, config.split_k, most), sb_per_split=0)
