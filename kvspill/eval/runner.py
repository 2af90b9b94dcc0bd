"""Run the quality harness: synthetic tasks by greedy generation, then teacher-forced agreement.

The configuration under test is any set of `EngineConfig` keyword arguments (the CLI's engine
flags plus `--engine-arg`). Teacher-forced agreement compares it, on real text, with the exact
reference: the same arguments without those that approximate attention or place the KV
(`REFERENCE_DROPS`, and every `sparse_*` field), so the reference keeps all KV on the gpu tier in
the model's dtype. Each side is one engine pass per length with `prompt_logprobs` (top
TF_TOP_K); the two engines never live at once.

Invariants:
- Everything is greedy and seeded (tasks.py): two runs of one configuration give one table.
- Only one engine is alive at a time (memory: a long-context model may just fit once).
- When the reference arguments equal those under test, agreement is not computed (it would be 1
  by construction) and the document says so.
- Sparse cold attention approximates decode rows only (prefill chunks are exact), so with
  `cold_attention="sparse"` the teacher-forced side runs the text one token per step
  (`max_num_batched_tokens=1`): every position is scored as a decode row would be.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from kvspill.eval.context_shift import SHIFT_TASK, run_shift_eval
from kvspill.eval.tasks import TASKS, make_samples, score, teacher_forced_text
from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams
from kvspill.types import TokenLogprobs

TF_TOP_K = 20  # the most prompt logprobs a request may ask for (SamplingParams' bound)
REFERENCE_DROPS = (
    "cold_attention",
    "kv_cache_dtype",
    "attention",
    "num_kv_blocks",
    "kv_cache_memory_bytes",
    "cpu_kv_budget_bytes",
    "disk_kv_budget_bytes",
    "num_cpu_kv_blocks",
    "num_disk_kv_blocks",
    "num_sink_blocks",
    "hot_window_tokens",
    "max_num_seqs",
    "block_size",  # placement only: the reference, all on the gpu tier, takes its default
)
OUTPUT_CHARS = 200  # of each sample's output kept in the JSON

Log = Callable[[str], None]


@dataclass(frozen=True)
class EvalSpec:
    tasks: tuple[str, ...]
    lengths: tuple[int, ...]  # tokens: prompt + generated
    num_samples: int
    seed: int = 0
    teacher_forced: bool = True


def reference_kwargs(engine_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The exact-attention reference of a configuration (see the module doc)."""
    return {
        k: v for k, v in engine_kwargs.items() if k not in REFERENCE_DROPS and not k.startswith("sparse_")
    }


def hot_kv_kwargs(
    hot_tokens: int, max_len: int, block_size: int = 16, num_sink_blocks: int = 1
) -> dict[str, Any]:
    """Engine arguments that keep about `hot_tokens` of a sequence's KV on the gpu tier and the rest
    in a cpu tier, so that cold attention runs at any length (one sequence at a time).

    The gpu tier holds the sink blocks, a hot window of `hot_tokens` and one prefill chunk of
    `hot_tokens` (the written blocks must be hot), plus two spare blocks; the cpu tier one whole
    sequence of `max_len`. The block size they are counted in is one of the arguments: an engine
    left to its default (8 or 16, `config.default_block_size`) could take another and find its
    tiers half the size meant."""
    if hot_tokens < block_size:
        raise ValueError(
            f"--hot-kv-tokens must be at least one block ({block_size} tokens), got {hot_tokens}"
        )
    return {
        "block_size": block_size,
        "num_kv_blocks": num_sink_blocks + -(-2 * hot_tokens // block_size) + 2,
        "num_cpu_kv_blocks": -(-max_len // block_size) + 2,
        "hot_window_tokens": hot_tokens,
        "max_num_batched_tokens": hot_tokens,
        "num_sink_blocks": num_sink_blocks,
        "max_num_seqs": 1,
    }


def run_tasks(llm: LLM, spec: EvalSpec, log: Log) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(one row per task and length, one record per sample); a progress line before each batch
    (a long length's batch runs minutes with nothing else to show) and its score after."""
    rows: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    count = lambda text: len(llm.engine.encode(text))  # noqa: E731 - the engine's own token count
    num_batches = len(spec.lengths) * len(spec.tasks)
    for length in spec.lengths:
        for task in spec.tasks:
            log(f"[{len(rows) + 1}/{num_batches}] {task} @ {length}: {spec.num_samples} samples ...")
            started = time.perf_counter()
            samples = make_samples(task, length, spec.num_samples, spec.seed, count)
            params = SamplingParams(temperature=0.0, max_tokens=TASKS[task][1])
            outputs = llm.generate([s.prompt for s in samples], params)
            scores = [score(o.text, s.answers) for s, o in zip(samples, outputs, strict=True)]
            seconds = time.perf_counter() - started
            for s, o, sc in zip(samples, outputs, scores, strict=True):
                records.append(
                    {
                        "task": task,
                        "length": length,
                        "index": s.index,
                        "score": sc,
                        "answers": list(s.answers),
                        "output": o.text[:OUTPUT_CHARS],
                        "num_prompt_tokens": s.num_prompt_tokens,
                    }
                )
            row = {
                "task": task,
                "length": length,
                "score": 100.0 * sum(scores) / len(scores),
                "num_samples": len(scores),
                "mean_prompt_tokens": sum(s.num_prompt_tokens for s in samples) / len(samples),
                "seconds": round(seconds, 2),
            }
            rows.append(row)
            log(f"{task:>18} @ {length:>6}: {row['score']:5.1f}  ({len(scores)} samples, {seconds:.1f} s)")
    return rows, records


def prompt_logprobs(llm: LLM, text: str) -> list[TokenLogprobs | None]:
    params = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=TF_TOP_K)
    out = llm.generate([text], params)[0]
    assert out.prompt_logprobs is not None
    return out.prompt_logprobs


def _kl_estimate(ref: TokenLogprobs, test: TokenLogprobs) -> float:
    """KL(ref || test) over the reference's top-k tokens plus one bucket for the rest. A token of
    the reference's top-k missing from the test's top-k gets the test's k-th logprob (an upper
    bound on its probability): exact where the test's top-k covers the reference's."""
    test_lp = dict(test.top)
    floor = test.top[-1][1] if test.top else -math.inf
    kl, p_mass, q_mass = 0.0, 0.0, 0.0
    for token, lp in ref.top:
        q = test_lp.get(token, floor)
        kl += math.exp(lp) * (lp - q)
        p_mass += math.exp(lp)
        q_mass += math.exp(q)
    p_rest, q_rest = max(1.0 - p_mass, 0.0), max(1.0 - q_mass, 1e-12)
    if p_rest > 0:
        kl += p_rest * (math.log(p_rest) - math.log(q_rest))
    return max(kl, 0.0)


def compare_logprobs(
    test: list[TokenLogprobs | None], ref: list[TokenLogprobs | None]
) -> dict[str, float | int]:
    """Top-1 agreement (%), mean KL estimate and mean NLL of each side over the scored tokens."""
    pairs = [(t, r) for t, r in zip(test, ref, strict=True) if t is not None and r is not None]
    if not pairs:
        raise ValueError("no scored tokens to compare: the text is a single token")
    top1 = sum(t.top[0][0] == r.top[0][0] for t, r in pairs) / len(pairs)
    return {
        "num_tokens": len(pairs),
        "top1_agreement": 100.0 * top1,
        "mean_kl": sum(_kl_estimate(r, t) for t, r in pairs) / len(pairs),
        "nll_test": -sum(t.logprob for t, _ in pairs) / len(pairs),
        "nll_reference": -sum(r.logprob for _, r in pairs) / len(pairs),
    }


def teacher_forced_kwargs(engine_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The test side's engine for teacher forcing: as given, but one token per step when sparse
    attention is on, so that each text position attends as a decode row (see the module doc)."""
    if engine_kwargs.get("cold_attention") != "sparse":
        return engine_kwargs
    # Eager and without kernel warm-up: every step here scores prompt logprobs, which runs eagerly
    # anyway (runner/model_runner.py), so graphs would only cost their capture, and a warm-up at
    # one token per step costs minutes; this side measures agreement, not speed. (Its one-token
    # steps once hit a device-side assert under CUDA graphs: the host raced ahead of the GPU,
    # fixed in runner/cuda_graphs.HostSets, 2026-11-27.)
    return {**engine_kwargs, "max_num_batched_tokens": 1, "enforce_eager": True, "kernel_warmup": False}


def _teacher_forced_side(
    llm: LLM, spec: EvalSpec, log: Log
) -> tuple[dict[int, str], dict[int, list[TokenLogprobs | None]]]:
    """The real text of each length (fitted in the engine's tokens) and its prompt logprobs."""
    texts, logprobs = {}, {}
    for i, length in enumerate(spec.lengths, 1):
        log(f"[teacher-forced {i}/{len(spec.lengths)}] {length} tokens of text, configuration under test ...")
        # one token short: the request generates one token after the text
        texts[length] = teacher_forced_text(length - 1, spec.seed, lambda s: len(llm.engine.encode(s)))
        logprobs[length] = prompt_logprobs(llm, texts[length])
    return texts, logprobs


def run_eval(
    model: str | None, engine_kwargs: dict[str, Any], spec: EvalSpec, log: Log = lambda _: None
) -> dict[str, Any]:
    """The whole harness for one configuration; returns the JSON document (see report.py). The
    `shift_ppl` task runs first, alone (context_shift.py); with no other task and no
    teacher forcing nothing else loads."""
    unknown = [t for t in spec.tasks if t not in TASKS and t != SHIFT_TASK]
    if unknown:
        raise ValueError(
            f"unknown task(s) {', '.join(unknown)}: choose from {', '.join([*TASKS, SHIFT_TASK])}"
        )
    started = time.perf_counter()
    shift_rows = run_shift_eval(model, engine_kwargs, spec.seed, log) if SHIFT_TASK in spec.tasks else []
    spec = replace(spec, tasks=tuple(t for t in spec.tasks if t != SHIFT_TASK))
    if shift_rows and not spec.tasks and not spec.teacher_forced:
        return _document(model, engine_kwargs, engine_kwargs, spec, [], [], [], None, started, shift_rows)
    ref_kwargs = reference_kwargs(engine_kwargs)
    log("loading the engine (configuration under test) ...")
    llm = LLM(model, **engine_kwargs)
    rows, records = run_tasks(llm, spec, log)
    texts: dict[int, str] = {}
    test_lps: dict[int, list[TokenLogprobs | None]] = {}
    tf_note = None
    if spec.teacher_forced and ref_kwargs == engine_kwargs:
        tf_note = "skipped: the configuration under test is the exact reference"
    elif spec.teacher_forced:
        tf_kwargs = teacher_forced_kwargs(engine_kwargs)
        if tf_kwargs != engine_kwargs:
            tf_note = "test side one token per step: sparse attention scores every position as a decode row"
            del llm
            gc.collect()
            log("loading the engine again, one token per step (sparse attention) ...")
            llm = LLM(model, **tf_kwargs)
        texts, test_lps = _teacher_forced_side(llm, spec, log)
    del llm
    gc.collect()
    agreement = []
    if test_lps:
        log("loading the exact reference engine ...")
        reference = LLM(model, **ref_kwargs)
        for length, text in texts.items():
            row = {"length": length, **compare_logprobs(test_lps[length], prompt_logprobs(reference, text))}
            agreement.append(row)
            log(
                f"{'teacher-forced':>18} @ {length:>6}: top-1 {row['top1_agreement']:.2f}%, KL {row['mean_kl']:.4f}"
            )
        del reference
        gc.collect()
    return _document(
        model, engine_kwargs, ref_kwargs, spec, rows, agreement, records, tf_note, started, shift_rows
    )


def _document(
    model: str | None,
    engine_kwargs: dict[str, Any],
    ref_kwargs: dict[str, Any],
    spec: EvalSpec,
    rows: list[dict[str, Any]],
    agreement: list[dict[str, Any]],
    records: list[dict[str, Any]],
    tf_note: str | None,
    started: float,
    shift_rows: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "model": model or "embedded SmolLM2-135M-Instruct",
        "engine_args": engine_kwargs,
        "reference_engine_args": ref_kwargs,
        "spec": asdict(spec),
        "tasks": rows,
        "teacher_forced": agreement,
        "teacher_forced_note": tf_note,
        "samples": records,
        "context_shift": shift_rows,
        "seconds": round(time.perf_counter() - started, 1),
    }
