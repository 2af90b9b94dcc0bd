"""Sweep the tensor-core kernel's Q6_K form (kernels/gguf_mma.py) on the Llama-3.1-8B shapes, against
the current path; re-time the Q4_K pick against the lane GEMV at 2 and 4 tokens.

    python3 .devbench/s32/mma6_sweep.py [BUDGET_S=240]     (repo root, a CUDA GPU, $OUT set)

Stage 1: Q6_K, 8 tokens, shapes qkv / down / lm_head: every config of GRID (block_n 16/32/64,
num_warps 2/4, magic off/on, num_stages 1/3, split_k 1/4; split K applies to <= SPLIT_K_MAX_ROWS
rows, as mma_config does, so lm_head runs each config with split_k 1) and the current path
(quant_linear). Ranked by the sum of us over the 3 shapes.
Stage 2: the best 3 configs on all 5 shapes at 8, 4, 16, 2 tokens (that order: the likeliest
winners first if the budget runs out) against the current path.
Stage 3: Q4_K, MMA_CONFIGS[("Q4_K", 8)] against quant_linear(..., path="gemv") at 2 and 4 tokens
on all 5 shapes.
Timing as bench/results/2026-12-02-h200-gguf-mma/mma_sweep.py: median of CUDA-graph replays over
rotating weight copies (>= 256 MB a replay); each kernel result is checked once against x @
dequantize(W).T (max abs error / max abs reference <= 2e-2, else recorded as wrong, not timed).
Before stage 1 (and stage 2), worker processes compile the configs on 64-row weights of the same
in_features (the same Triton specialization) into Triton's cache; MMA6_WORKERS=0 turns that off.

Writes $OUT/mma6_stage1.jsonl (stage 1), $OUT/mma6_stage2.jsonl (stages 2 and 3: "stage" says
which), $OUT/mma6_best.json ({"Q6_K,T": MmaConfig fields} where the best config beat the current
path on the sum over the 5 shapes, rewritten after each token count) and $OUT/mma6_totals.json
(every token count's sums, and stage 3's). No new measurement starts past each stage's share of
the budget (STAGE_END).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

OUT = os.environ.get("OUT", "/tmp")
T0 = time.time()
BUDGET_S = float(sys.argv[1]) if len(sys.argv) > 1 else 240.0
STAGE_END = {1: 0.55, 2: 0.85, 3: 0.97}  # fraction of the budget after which a stage starts nothing
STAGE1_SHAPES = ("qkv", "down", "lm_head")
STAGE2_TOKENS = (8, 4, 16, 2)
STAGE3_TOKENS = (2, 4)
TOP = 3
MAX_REL_ERR = 2e-2
COMPILE_ROWS = 64  # rows of the weights the workers compile on (a multiple of 16, like every shape)


def grid():
    """Stage 1's configs (48)."""
    from kvspill.kernels.gguf_mma import MmaConfig

    return [
        MmaConfig(block_n=bn, num_warps=nw, split_k=sk, num_stages=ns, magic=mg)
        for bn, nw, mg, ns, sk in itertools.product((16, 32, 64), (2, 4), (False, True), (1, 3), (1, 4))
    ]


def effective(cfg, rows: int):
    """`cfg` as the dispatcher runs it on `rows` rows (no split K past SPLIT_K_MAX_ROWS)."""
    from kvspill.kernels.gguf_mma import SPLIT_K_MAX_ROWS

    return dataclasses.replace(cfg, split_k=1) if rows > SPLIT_K_MAX_ROWS and cfg.split_k != 1 else cfg


def elapsed() -> float:
    return time.time() - T0


def out_of_budget(stage: int) -> bool:
    return elapsed() > STAGE_END[stage] * BUDGET_S


# ---- compile workers (spawned processes: this module is imported there, main() is not run) ----


def _compile_one(task) -> str:
    """Run one (qtype, in_features, tokens, config fields or None for `path`) on a COMPILE_ROWS-row
    weight: Triton compiles it into its on-disk cache. Returns "" or the error."""
    import torch

    from kvspill.bench.kernels_gguf import random_weight_cuda
    from kvspill.kernels.gguf_mma import MmaConfig, quant_matmul_mma
    from kvspill.kernels.quant_linear import quant_linear

    qtype, in_features, tokens, fields, path = task
    try:
        w = random_weight_cuda(qtype, COMPILE_ROWS, in_features)
        x = torch.randn((tokens, in_features), dtype=torch.bfloat16, device="cuda")
        if fields is None:
            quant_linear(x, w, path=path)
        else:
            quant_matmul_mma(x, w, config=MmaConfig(**fields))
        torch.cuda.synchronize()
        return ""
    except Exception as e:  # noqa: BLE001
        return f"{task}: {str(e)[:160]}"


def precompile(tasks: list, label: str) -> None:
    """Compile `tasks` in parallel worker processes (MMA6_WORKERS, default min(12, cores - 2))."""
    workers = int(os.environ.get("MMA6_WORKERS", str(max(1, min(12, (os.cpu_count() or 4) - 2)))))
    if workers <= 0 or not tasks:
        return
    t = time.time()
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        errors = [e for e in pool.map(_compile_one, tasks) if e]
    print(
        f"precompile {label}: {len(tasks)} kernels, {workers} workers, {time.time() - t:.0f} s, "
        f"{len(errors)} errors {errors[:3]}",
        flush=True,
    )


# ---- timing ----


class Bench:
    def __init__(self) -> None:
        from kvspill.bench.kernels_gguf import copy_ceiling_gbps

        self.ceiling = copy_ceiling_gbps()
        self.weights: dict = {}  # (qtype, shape) -> rotating copies (all kept: ~2 GB per type)
        self.refs: dict = {}  # (qtype, shape, tokens) -> (x, x @ W.T in fp32)
        self.done: dict = {}  # (qtype, shape, tokens, cfg) -> result (lm_head's split-K twins)
        print(f"ceiling {self.ceiling:.0f} GB/s", flush=True)

    def copies(self, qtype: str, shape: str) -> list:
        from kvspill.bench.kernels_gguf import SHAPES, _copies, random_weight_cuda

        if (qtype, shape) not in self.weights:
            self.weights[(qtype, shape)] = _copies(random_weight_cuda(qtype, *SHAPES[shape]))
        return self.weights[(qtype, shape)]

    def case(self, qtype: str, shape: str, tokens: int):
        import torch

        from kvspill.kernels.gguf_dequant import dequantize

        key = (qtype, shape, tokens)
        if key not in self.refs:
            w = self.copies(qtype, shape)[0]
            gen = torch.Generator(device="cuda").manual_seed(tokens)
            x = torch.randn((tokens, w.in_features), dtype=torch.bfloat16, device="cuda", generator=gen)
            self.refs[key] = (x, x.float() @ dequantize(w, torch.float32).t())
            torch.cuda.empty_cache()
        return self.refs[key]

    def time_us(self, fn, ws: list, x) -> tuple[float, float]:
        import torch
        import triton.testing

        fn(x, ws[0])
        torch.cuda.synchronize()

        def step() -> None:
            for w in ws:
                fn(x, w)

        us = float(triton.testing.do_bench_cudagraph(step, rep=20, return_mode="median")) * 1e3 / len(ws)
        return us, ws[0].nbytes / us / 1e3

    def _row(self, us: float, gbs: float) -> dict:
        return dict(us=round(us, 2), gbs=round(gbs), pct=round(100 * gbs / self.ceiling, 1))

    def mma(self, qtype: str, shape: str, tokens: int, cfg) -> dict:
        """Check then time quant_matmul_mma with `cfg` as the dispatcher would run it on `shape`."""
        from kvspill.kernels.gguf_mma import quant_matmul_mma

        ws = self.copies(qtype, shape)
        cfg = effective(cfg, ws[0].out_features)
        key = (qtype, shape, tokens, cfg)
        if key in self.done:
            return self.done[key]
        x, ref = self.case(qtype, shape, tokens)
        try:
            got = quant_matmul_mma(x, ws[0], config=cfg).float()
            err = float((got - ref).abs().max() / ref.abs().max())
            if not err <= MAX_REL_ERR:  # NaN too
                res = dict(cfg=dataclasses.asdict(cfg), err=f"wrong result: rel {err:.3g}")
            else:
                us, gbs = self.time_us(lambda x, w: quant_matmul_mma(x, w, config=cfg), ws, x)
                res = dict(cfg=dataclasses.asdict(cfg), rel_err=round(err, 5), **self._row(us, gbs))
        except Exception as e:  # noqa: BLE001
            res = dict(cfg=dataclasses.asdict(cfg), err=str(e)[:160])
        self.done[key] = res
        return res

    def path(self, qtype: str, shape: str, tokens: int, path: str | None = None) -> dict:
        """Time quant_linear on its own path (`path` None) or a forced one."""
        from kvspill.kernels.quant_linear import quant_linear, quant_linear_path

        ws = self.copies(qtype, shape)
        x, _ = self.case(qtype, shape, tokens)
        name = path or quant_linear_path(x, ws[0])
        try:
            us, gbs = self.time_us(lambda x, w: quant_linear(x, w, path=path), ws, x)
        except Exception as e:  # noqa: BLE001
            return dict(path=name, err=str(e)[:160])
        return dict(path=name, **self._row(us, gbs))


def write(f, rec: dict) -> None:
    f.write(json.dumps(rec) + "\n")
    f.flush()


# ---- stages ----


def stage1(bench: Bench, configs: list) -> list:
    """Time every config on STAGE1_SHAPES at 8 tokens; the TOP configs by summed us."""
    sums: dict = {}
    base_sum = 0.0
    with open(f"{OUT}/mma6_stage1.jsonl", "w") as f:
        for shape in STAGE1_SHAPES:
            base = bench.path("Q6_K", shape, 8)
            base_sum += base.get("us", float("inf"))
            write(f, dict(stage=1, qtype="Q6_K", shape=shape, t=8, base=base))
            print("stage1 base", shape, base, flush=True)
        for i, cfg in enumerate(configs):
            if out_of_budget(1):
                print(f"stage1: budget, {i} of {len(configs)} configs timed", flush=True)
                break
            per_shape = []
            for shape in STAGE1_SHAPES:
                r = bench.mma("Q6_K", shape, 8, cfg)
                per_shape.append(r.get("us"))
                write(f, dict(stage=1, qtype="Q6_K", shape=shape, t=8, grid_cfg=dataclasses.asdict(cfg), **r))
            if all(us is not None for us in per_shape):
                sums[cfg] = sum(per_shape)
            print(f"stage1 {i + 1}/{len(configs)} {cfg} {per_shape} {elapsed():.0f} s", flush=True)
    ranked = sorted(sums.items(), key=lambda kv: kv[1])
    print(f"stage1 base sum {base_sum:.1f} us; top", [(round(s, 1), c) for c, s in ranked[:6]], flush=True)
    return [c for c, _ in ranked[:TOP]]


def stage2(bench: Bench, tops: list, totals: dict, best: dict) -> None:
    """The TOP configs and the current path on all shapes per token count; `best` gets the winner
    of each count that beat the current path on the summed us."""
    from kvspill.bench.kernels_gguf import SHAPES

    with open(f"{OUT}/mma6_stage2.jsonl", "w") as f:
        for t in STAGE2_TOKENS if tops else ():
            base_sum, sums, complete = 0.0, {c: 0.0 for c in tops}, True
            for shape in SHAPES:
                if out_of_budget(2):
                    complete = False
                    break
                base = bench.path("Q6_K", shape, t)
                rec = dict(stage=2, qtype="Q6_K", shape=shape, t=t, base=base, mma=[])
                base_sum += base.get("us", float("inf"))
                for cfg in tops:
                    r = bench.mma("Q6_K", shape, t, cfg)
                    rec["mma"].append(r)
                    sums[cfg] += r.get("us", float("inf"))
                write(f, rec)
                print("stage2", json.dumps(rec), flush=True)
            if not complete or not tops:
                print(f"stage2 T={t}: incomplete (budget), not picked", flush=True)
                continue
            cfg, s = min(sums.items(), key=lambda kv: kv[1])
            totals[f"Q6_K,{t}"] = dict(
                base_us=round(base_sum, 1), mma_us={str(c): round(v, 1) for c, v in sums.items()}
            )
            if s < base_sum:
                best[f"Q6_K,{t}"] = dataclasses.asdict(cfg)
            print(
                f"stage2 T={t}: base {base_sum:.1f} us, best {s:.1f} us {cfg} "
                f"{'PICK' if s < base_sum else 'no pick'}",
                flush=True,
            )
            dump(best, totals)


def stage3(bench: Bench, totals: dict) -> None:
    """Q4_K: the picked config against the lane GEMV at STAGE3_TOKENS (appended to stage 2's file)."""
    from kvspill.bench.kernels_gguf import SHAPES
    from kvspill.kernels.gguf_mma import MMA_CONFIGS

    cfg = MMA_CONFIGS[("Q4_K", 8)]
    with open(f"{OUT}/mma6_stage2.jsonl", "a") as f:
        for t in STAGE3_TOKENS:
            mma_sum, gemv_sum, n = 0.0, 0.0, 0
            for shape in SHAPES:
                if out_of_budget(3):
                    break
                r_mma = bench.mma("Q4_K", shape, t, cfg)
                r_gemv = bench.path("Q4_K", shape, t, path="gemv")
                rec = dict(stage=3, qtype="Q4_K", shape=shape, t=t, mma=r_mma, gemv=r_gemv)
                write(f, rec)
                print("stage3", json.dumps(rec), flush=True)
                mma_sum += r_mma.get("us", float("inf"))
                gemv_sum += r_gemv.get("us", float("inf"))
                n += 1
            totals[f"Q4_K,{t}"] = dict(
                shapes=n, mma_us=round(mma_sum, 1), gemv_us=round(gemv_sum, 1), cfg=dataclasses.asdict(cfg)
            )
            print(f"stage3 T={t}: {n} shapes, mma {mma_sum:.1f} us, gemv {gemv_sum:.1f} us", flush=True)


def dump(best: dict, totals: dict) -> None:
    with open(f"{OUT}/mma6_best.json", "w") as f:
        json.dump(best, f, indent=1)
    with open(f"{OUT}/mma6_totals.json", "w") as f:
        json.dump(totals, f, indent=1)


def compile_tasks(configs: list, tokens: int) -> list:
    """Worker tasks: each config on both in_features of the 8B shapes (4096, 14336)."""
    from kvspill.bench.kernels_gguf import SHAPES

    ins = sorted({k for _, k in SHAPES.values()})
    return [("Q6_K", k, tokens, dataclasses.asdict(c), None) for c in configs for k in ins]


def main() -> None:
    import torch

    from kvspill.bench.kernels_gguf import SHAPES
    from kvspill.kernels.gguf_mma import MMA_CONFIGS, SPLIT_K_MAX_ROWS

    assert torch.cuda.is_available(), "mma6_sweep needs a CUDA GPU"
    print(f"{torch.cuda.get_device_name()}, budget {BUDGET_S:.0f} s", flush=True)
    configs = grid()
    ins = sorted({k for _, k in SHAPES.values()})
    q4k = dataclasses.asdict(MMA_CONFIGS[("Q4_K", 8)])
    tasks = compile_tasks(configs, 8)
    tasks += [("Q6_K", k, t, None, None) for k in ins for t in STAGE2_TOKENS]  # the current path
    tasks += [("Q4_K", k, t, q4k, None) for k in ins for t in STAGE3_TOKENS]
    tasks += [("Q4_K", k, t, dict(q4k, split_k=1), None) for k in ins for t in STAGE3_TOKENS]
    tasks += [("Q4_K", k, t, None, "gemv") for k in ins for t in STAGE3_TOKENS]
    precompile(tasks, "stage 1 and 3")
    bench = Bench()
    tops = stage1(bench, configs)
    # 16 tokens specialize differently (num_tokens % 16 == 0), and split K differs past 8,192 rows.
    extra = tops + [effective(c, SPLIT_K_MAX_ROWS + 1) for c in tops]
    if not out_of_budget(2):
        precompile(compile_tasks(list(dict.fromkeys(extra)), 16), "stage 2, 16 tokens")
    best: dict = {}
    totals: dict = {"stage1_top": [dataclasses.asdict(c) for c in tops]}
    stage2(bench, tops, totals, best)
    stage3(bench, totals)
    dump(best, totals)
    print("best", json.dumps(best), flush=True)
    print(f"done {elapsed():.0f} s", flush=True)


if __name__ == "__main__":
    main()
