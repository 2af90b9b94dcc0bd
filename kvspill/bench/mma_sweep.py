"""Tune the tensor-core GGUF kernel (kernels/gguf_mma.py) on this GPU: `python -m kvspill.bench.mma_sweep`.

    python -m kvspill.bench.mma_sweep --types Q4_K Q6_K --tokens 2 4 8 16 32 --budget-s 300 --out sweep/
    KVSPILL_MMA_CONFIGS=sweep/mma_configs.json kvspill serve ...      # the engine takes the picks

Stage 1, per type: every config of `grid()` (form: words, sub-blocks with or without magic
quants, whole super-blocks; row tile, warps, pipeline stages, split K, the words form's
accumulator chains) at `--stage1-tokens` tokens (8 unless given; 32 ranks the configs where
32-sequence steps run) on the qkv / down / lm_head shapes of Llama-3.1-8B, ranked by the summed
time. Stage 2: the best TOP configs (words-form ones also with wide weights split in
two) on all five shapes at each token count, beside the path `quant_linear` takes today. A count
whose best config beats that path on the sum gets it in `mma_configs.json` (the
KVSPILL_MMA_CONFIGS format). Timing as kernels_gguf: medians of CUDA-graph replays over rotating
weight copies (>= 256 MB a replay); every config's result is checked once against
x @ dequantize(W).T (max error <= MAX_REL_ERR of the largest output), a wrong one is not timed.
Before stage 1, worker processes compile the configs into Triton's cache (`--workers 0`: off).
Writes stage1.jsonl, stage2.jsonl and mma_configs.json under --out. No new measurement starts
once a stage's share of --budget-s is spent.

Invariant: importing this module does nothing; without CUDA `main` says so and returns 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from kvspill.kernels.gguf_mma_configs import (
    MMA_TOKEN_KEYS,
    MMA_TYPES,
    SPLIT_K_MAX_ROWS,
    WHOLE_TYPES,
    WORDS_TYPES,
    MmaConfig,
    for_shape,
)

STAGE1_SHAPES = ("qkv", "down", "lm_head")
STAGE1_TOKENS = 8  # stage 1's token count unless --stage1-tokens says otherwise
TOP = 3
MAX_REL_ERR = 2e-2
STAGE_END = {1: 0.55, 2: 0.97}  # the share of the budget after which a stage starts nothing
COMPILE_ROWS = 64  # rows of the weights the workers compile on (the same Triton specialization)


FORMS = ("words", "sub", "whole")  # grid()'s forms: see MmaConfig


def grid(forms: tuple[str, ...] = FORMS) -> list[MmaConfig]:
    """Stage 1's configs (either type), in `forms`' order (the budget may end stage 1): the words
    form (from 32 rows on 2 warps, where Triton's dots are mma.sync, up to 128 rows on 8; one
    accumulator chain or two), the sub-block form with and without magic quants, and the
    whole-super-block form, which has no magic variant."""
    configs = []
    if "words" in forms:
        configs += [
            MmaConfig(block_n=bn, num_warps=nw, split_k=sk, num_stages=ns, words=True, two_acc=two)
            for bn, nw, ns, sk, two in itertools.product(
                (32, 64, 128), (2, 4, 8), (3, 2, 4), (4, 2, 1, 8), (False, True)
            )
            if nw * 16 <= bn * 2  # 8 warps on 32 rows leave warps without an MMA tile
        ]
    old = [(False, False), (True, False)] if "sub" in forms else []
    old += [(False, True)] if "whole" in forms else []  # (magic, whole)
    configs += [
        MmaConfig(block_n=bn, num_warps=nw, split_k=sk, num_stages=ns, magic=mg, whole=wh)
        for bn, (mg, wh), nw, ns, sk in itertools.product((32, 64, 16, 128), old, (2, 4), (3, 1), (4, 1))
    ]
    return configs


def pick(today_us: float, sums: dict[MmaConfig, float]) -> MmaConfig | None:
    """The config of one (type, token count) when its summed time beats today's path, else None."""
    if not sums:
        return None
    cfg, us = min(sums.items(), key=lambda kv: kv[1])
    return cfg if us < today_us else None


class Bench:
    """Weights, references and timings on the GPU (torch and Triton imported lazily)."""

    def __init__(self) -> None:
        from kvspill.bench.kernels_gguf import copy_ceiling_gbps

        self.ceiling = copy_ceiling_gbps()
        self.weights: dict = {}
        self.refs: dict = {}

    def copies(self, qtype: str, shape: str) -> list:
        from kvspill.bench.kernels_gguf import SHAPES, _copies, random_weight_cuda

        if (qtype, shape) not in self.weights:
            if any(q != qtype for q, _ in self.weights):  # one type's copies at a time (~1.3 GB)
                self.weights, self.refs = {}, {}
            self.weights[(qtype, shape)] = _copies(random_weight_cuda(qtype, *SHAPES[shape]))
        return self.weights[(qtype, shape)]

    def case(self, qtype: str, shape: str, tokens: int) -> tuple[Any, Any]:
        import torch

        from kvspill.kernels.gguf_dequant import dequantize

        key = (qtype, shape, tokens)
        if key not in self.refs:
            w = self.copies(qtype, shape)[0]
            gen = torch.Generator(device="cuda").manual_seed(tokens)
            x = torch.randn((tokens, w.in_features), dtype=torch.bfloat16, device="cuda", generator=gen)
            self.refs[key] = (x, x.float() @ dequantize(w, torch.float32).t())
        return self.refs[key]

    def time_us(self, fn: Any, qtype: str, shape: str, tokens: int) -> dict:
        from kvspill.bench.kernels_gguf import time_rotating_us

        ws = self.copies(qtype, shape)
        us = time_rotating_us(fn, ws, self.case(qtype, shape, tokens)[0], rep=20)
        gbs = ws[0].nbytes / us / 1e3
        return dict(us=round(us, 2), gbs=round(gbs), pct=round(100 * gbs / self.ceiling, 1))

    def mma(self, qtype: str, shape: str, tokens: int, cfg: MmaConfig) -> dict:
        """Check, then time, the kernel with `cfg` as the dispatcher would run it on `shape`."""
        from kvspill.kernels.gguf_mma import quant_matmul_mma

        w = self.copies(qtype, shape)[0]
        cfg = for_shape(cfg, w.out_features, w.in_features)
        x, ref = self.case(qtype, shape, tokens)
        try:
            got = quant_matmul_mma(x, w, config=cfg).float()
            err = float((got - ref).abs().max() / ref.abs().max())
            if not err <= MAX_REL_ERR:  # NaN too
                return dict(cfg=dataclasses.asdict(cfg), err=f"wrong result: rel {err:.3g}")
            timed = self.time_us(lambda x, w: quant_matmul_mma(x, w, config=cfg), qtype, shape, tokens)
            return dict(cfg=dataclasses.asdict(cfg), rel_err=round(err, 5), **timed)
        except Exception as e:  # noqa: BLE001 - a config that fails to compile or run is a result
            return dict(cfg=dataclasses.asdict(cfg), err=str(e)[:160])

    def today(self, qtype: str, shape: str, tokens: int) -> dict:
        """The path quant_linear takes today, timed."""
        from kvspill.kernels.quant_linear import quant_linear, quant_linear_path

        x, _ = self.case(qtype, shape, tokens)
        path = quant_linear_path(x, self.copies(qtype, shape)[0])
        return dict(path=path, **self.time_us(lambda x, w: quant_linear(x, w), qtype, shape, tokens))


def _compile_one(task: tuple) -> str:
    """Run one (qtype, in_features, tokens, config fields) on COMPILE_ROWS rows (fills Triton's
    cache); "" or the error."""
    import torch

    from kvspill.bench.kernels_gguf import random_weight_cuda
    from kvspill.kernels.gguf_mma import quant_matmul_mma

    qtype, in_features, tokens, fields = task
    try:
        w = random_weight_cuda(qtype, COMPILE_ROWS, in_features)
        x = torch.randn((tokens, in_features), dtype=torch.bfloat16, device="cuda")
        quant_matmul_mma(x, w, config=MmaConfig(**fields))
        torch.cuda.synchronize()
        return ""
    except Exception as e:  # noqa: BLE001
        return f"{task}: {str(e)[:160]}"


def precompile(tasks: list[tuple], workers: int) -> None:
    if workers <= 0 or not tasks:
        return
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        errors = [e for e in pool.map(_compile_one, tasks) if e]
    print(f"precompiled {len(tasks)} kernels in {time.time() - t0:.0f} s, {len(errors)} errors {errors[:3]}")


class Sweep:
    def __init__(self, args: argparse.Namespace, bench: Any = None) -> None:
        self.args, self.t0 = args, time.time()
        self.out = Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.bench = bench or Bench()

    def spent(self, stage: int) -> bool:
        return time.time() - self.t0 > STAGE_END[stage] * self.args.budget_s

    def log(self, name: str, rec: dict) -> None:
        with open(self.out / name, "a") as f:
            f.write(json.dumps(rec) + "\n")

    def stage1(self, qtype: str, configs: list[MmaConfig]) -> list[MmaConfig]:
        """The TOP configs of `qtype` by summed us on STAGE1_SHAPES at --stage1-tokens tokens."""
        tokens = self.args.stage1_tokens
        sums: dict[MmaConfig, float] = {}
        for i, cfg in enumerate(configs):
            if self.spent(1) and len(sums) >= TOP:
                print(f"{qtype} stage 1: the budget's share is spent after {i} of {len(configs)} configs")
                break
            runs = [self.bench.mma(qtype, shape, tokens, cfg) for shape in STAGE1_SHAPES]
            for shape, r in zip(STAGE1_SHAPES, runs, strict=True):
                self.log("stage1.jsonl", dict(qtype=qtype, shape=shape, t=tokens, **r))
            if all("us" in r for r in runs):
                sums[cfg] = sum(r["us"] for r in runs)
        ranked = sorted(sums, key=sums.__getitem__)
        print(f"{qtype} stage 1 top: {[(round(sums[c], 1), c) for c in ranked[:TOP]]}", flush=True)
        return ranked[:TOP]

    def stage2(self, qtype: str, tops: list[MmaConfig], picks: dict) -> None:
        """Each token count: the tops and today's path on every shape; the verdict into `picks`."""
        from kvspill.bench.kernels_gguf import SHAPES

        # Each words-form top also with wide weights split in two (wide_split_k), timed only where
        # it differs: on weights past the dispatcher's row limit.
        wide = {c: dataclasses.replace(c, wide_split_k=2) for c in tops if c.words and c.wide_split_k == 1}
        for t in self.args.tokens:
            if self.spent(2):
                print(f"{qtype} stage 2: the budget is spent before {t} tokens")
                return
            base, sums = 0.0, dict.fromkeys([*tops, *wide.values()], 0.0)
            for shape, (rows, _) in SHAPES.items():
                today = self.bench.today(qtype, shape, t)
                runs = {cfg: self.bench.mma(qtype, shape, t, cfg) for cfg in tops}
                for top, twin in wide.items():
                    runs[twin] = (
                        self.bench.mma(qtype, shape, t, twin) if rows > SPLIT_K_MAX_ROWS else runs[top]
                    )
                self.log(
                    "stage2.jsonl", dict(qtype=qtype, shape=shape, t=t, today=today, mma=list(runs.values()))
                )
                base += today["us"]
                for cfg, r in runs.items():
                    sums[cfg] += r.get("us", float("inf"))
            picked = pick(base, {c: s for c, s in sums.items() if s < float("inf")})
            if picked is not None:
                picks[f"{qtype},{t}"] = dataclasses.asdict(picked)
            best = min(sums.values(), default=float("inf"))
            print(f"{qtype} {t} tokens: today {base:.1f} us, best {best:.1f} us, pick {picked}", flush=True)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--types", nargs="+", default=list(MMA_TYPES), choices=MMA_TYPES)
    ap.add_argument("--forms", nargs="+", default=list(FORMS), choices=FORMS, help="kernel forms to sweep")
    ap.add_argument("--tokens", nargs="+", type=int, default=[2, 4, 8, 16, 32])
    ap.add_argument(
        "--stage1-tokens",
        type=int,
        default=STAGE1_TOKENS,
        help="the token count stage 1 ranks the configs at",
    )
    ap.add_argument("--budget-s", type=float, default=300.0, help="seconds the sweep may take")
    ap.add_argument("--workers", type=int, default=max(0, min(12, (os.cpu_count() or 2) - 2)))
    ap.add_argument("--out", default="mma-sweep", help="folder for the JSON files")
    args = ap.parse_args(argv)
    bad = [t for t in [*args.tokens, args.stage1_tokens] if t not in MMA_TOKEN_KEYS]
    if bad:
        ap.error(
            f"--tokens and --stage1-tokens take powers of two from 2 to 64 (the dispatcher's keys), got {bad}"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    import torch

    args = _parse(argv)
    if not torch.cuda.is_available():
        print("mma_sweep needs a CUDA GPU")
        return 1
    from kvspill.bench.kernels_gguf import SHAPES

    configs = grid(tuple(args.forms))
    ins = sorted({k for _, k in SHAPES.values()})
    sweep = Sweep(args)  # the budget counts the compiles too
    picks: dict[str, dict] = {}
    forms = {
        q: [c for c in configs if (q in WORDS_TYPES or not c.words) and (q in WHOLE_TYPES or not c.whole)]
        for q in args.types
    }
    precompile(
        [
            (q, k, args.stage1_tokens, dataclasses.asdict(c))
            for q in args.types
            for c in forms[q]
            for k in ins
        ],
        args.workers,
    )
    for qtype in args.types:
        sweep.stage2(qtype, sweep.stage1(qtype, forms[qtype]), picks)
    (sweep.out / "mma_configs.json").write_text(json.dumps(picks, indent=1) + "\n")
    print(f"{len(picks)} picks in {sweep.out / 'mma_configs.json'} ({time.time() - sweep.t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
