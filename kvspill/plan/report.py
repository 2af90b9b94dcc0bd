"""What a memory plan says to people: advice when it does not fit, a table, and JSON.

`advise` turns a plan that does not fit into lines that each name a flag and a number that
would make it fit (or come closer); `format_plan_table` lays several plans side by side as plain
text (rich prints it as is); `plan_to_json` is the same content as a JSON-ready dict.

Invariants: no torch, no I/O; advice is computed by re-planning with one flag changed, so every
number it suggests was checked by the same arithmetic (`compute_plan`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from typing import Any

from kvspill.plan.arithmetic import MemoryPlan, PlanRequest, compute_plan
from kvspill.plan.bandwidths import CPU_RATE_FIELDS, Bandwidths
from kvspill.plan.batched import max_seqs_decode
from kvspill.plan.costs import DecodeFloor
from kvspill.plan.sparse import sparse_eager_reason
from kvspill.plan.units import GiB, format_bytes, format_tokens
from kvspill.plan.weights import GGUF_BITS_PER_WEIGHT


def _gib_up(num_bytes: float) -> str:
    """A flag value that is at least `num_bytes`: GiB rounded up to 0.1."""
    return f"{math.ceil(num_bytes / GiB * 10) / 10:g}GiB"


def _round_up(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size) * block_size


def _gpu_ok(plan: MemoryPlan) -> bool:
    """The GPU holds weights, reserves and the KV the context needs there at least."""
    need = min(_round_up(plan.context_len, plan.request.block_size), plan.min_gpu_kv_tokens)
    return plan.usable_vram_bytes >= _fixed_bytes(plan) and plan.gpu_kv_tokens >= need


def _fixed_bytes(plan: MemoryPlan) -> int:
    return plan.weight_bytes + plan.activation_peak_bytes + plan.reserve_bytes


def _replan(plan: MemoryPlan, bandwidths: Bandwidths, **changes: Any) -> MemoryPlan:
    request: PlanRequest = replace(plan.request, **changes)
    return compute_plan(request, bandwidths)


def _gpu_advice(plan: MemoryPlan, bandwidths: Bandwidths) -> list[str]:
    """The GPU cannot hold weights + reserves + the hot KV: more VRAM, smaller chunks, fewer seqs."""
    r = plan.request
    need_tokens = min(_round_up(plan.context_len, r.block_size), plan.min_gpu_kv_tokens)
    need = _fixed_bytes(plan) + need_tokens * plan.kv_bytes_per_token
    # The allocator slack grows with the usable VRAM: step up from the estimate until it holds.
    budget_gib = math.ceil(need / r.gpu_memory_utilization / GiB * 10) / 10
    while budget_gib < 4096 and not _gpu_ok(
        _replan(plan, bandwidths, vram_budget_bytes=int(budget_gib * GiB))
    ):
        budget_gib = round(budget_gib + 0.1, 1)
    lines = [
        f"the GPU needs {format_bytes(need)}: weights {format_bytes(plan.weight_bytes)}, activations "
        f"{format_bytes(plan.activation_peak_bytes)}, reserves "
        f"{format_bytes(_fixed_bytes(plan) - plan.weight_bytes - plan.activation_peak_bytes)}, and "
        f"{need_tokens} tokens of hot KV ({format_bytes(need_tokens * plan.kv_bytes_per_token)}); "
        f"{format_bytes(plan.usable_vram_bytes)} is usable: --vram-budget {budget_gib:g}GiB"
    ]
    utilization = max(0.05, math.ceil(need / r.vram_budget_bytes * 100) / 100)
    while utilization <= 1.0 and not _gpu_ok(_replan(plan, bandwidths, gpu_memory_utilization=utilization)):
        utilization = round(utilization + 0.01, 2)
    if utilization <= 1.0:
        lines.append(f"or --gpu-memory-utilization {utilization:.2f}")
    if plan.weight_bytes > r.vram_budget_bytes:
        lines.append(
            f"the weights alone ({format_bytes(plan.weight_bytes)}) exceed the VRAM budget "
            f"({format_bytes(r.vram_budget_bytes)})"
        )
    lines += _quantization_advice(plan, bandwidths)
    lines += _offload_advice(plan, bandwidths)
    if r.weight_dtype_bytes > 2:
        half = _replan(plan, bandwidths, weight_dtype="bfloat16")
        lines.append(
            f"--dtype bfloat16 halves the weights to {format_bytes(half.weight_bytes)}"
            + (" and fits" if half.fits else "")
        )
    chunk = r.max_num_batched_tokens // 2
    while chunk >= 256:
        smaller = _replan(plan, bandwidths, max_num_batched_tokens=chunk)
        if _gpu_ok(smaller):
            lines.append(
                f"--max-num-batched-tokens {chunk}: activations {format_bytes(plan.activation_peak_bytes)}"
                f" -> {format_bytes(smaller.activation_peak_bytes)}, hot set + chunk {smaller.min_gpu_kv_tokens}"
                " tokens"
            )
            break
        chunk //= 2
    return lines + _held_memory_advice(plan, bandwidths)


def _held_memory_advice(plan: MemoryPlan, bandwidths: Bandwidths) -> list[str]:
    """What the Q4_K scale pairs and fewer sequences (logits, graphs, the pairs) would free."""
    r = plan.request
    lines: list[str] = []
    if r.scale_pair_bytes:
        without = _replan(plan, bandwidths, scale_pairs="off")
        lines.append(
            f"KVSPILL_SCALE_PAIRS=0 frees the Q4_K scale pairs ({format_bytes(r.scale_pair_bytes)}; "
            "steps of several sequences about 10% slower)" + (" and fits" if without.fits else "")
        )
    seqs = r.max_num_seqs // 2
    while seqs >= 1:
        fewer = _replan(plan, bandwidths, max_num_seqs=seqs)
        if _gpu_ok(fewer):
            freed = _fixed_bytes(plan) - _fixed_bytes(fewer)
            pairs = " and the Q4_K scale pairs" if fewer.request.scale_pair_bytes < r.scale_pair_bytes else ""
            lines.append(
                f"--max-num-seqs {seqs}: frees {format_bytes(freed)} of logits and CUDA-graph memory{pairs}"
            )
            break
        seqs //= 2
    return lines


def _tier_advice(plan: MemoryPlan, bandwidths: Bandwidths) -> list[str]:
    """The context does not fit the tiers: more RAM, a disk tier, fp8 KV."""
    r, kvpt = plan.request, plan.kv_bytes_per_token
    ctx = _round_up(plan.context_len, r.block_size)
    lines: list[str] = []
    ram_need = max(0, ctx - plan.gpu_kv_tokens - plan.disk_kv_tokens) * kvpt
    with_ram = _replan(plan, bandwidths, ram_budget_bytes=ram_need)
    lines.append(
        f"--cpu-kv-budget {_gib_up(ram_need)} (now {format_bytes(r.ram_budget_bytes)}) holds the "
        f"{ctx - plan.gpu_kv_tokens - plan.disk_kv_tokens} cold tokens in pinned RAM: "
        f"about {with_ram.decode_tok_s:.2f} tok/s decode"
    )
    disk_need = max(0, ctx - plan.gpu_kv_tokens - plan.cpu_kv_tokens) * kvpt
    with_disk = _replan(plan, bandwidths, disk_budget_bytes=disk_need)
    lines.append(
        f"--disk-kv-budget {_gib_up(disk_need)} (now {format_bytes(r.disk_budget_bytes)}) keeps the other "
        f"{ctx - plan.gpu_kv_tokens - plan.cpu_kv_tokens} tokens on disk, read every decode step: "
        f"about {with_disk.decode_tok_s:.2f} tok/s decode"
    )
    return lines


def _quantization_advice(plan: MemoryPlan, bandwidths: Bandwidths) -> list[str]:
    """The widest GGUF file type whose weights let the plan fit (kvspill keeps it quantized on CUDA)."""
    r = plan.request
    if r.measured_weight_bytes is not None or r.quantization in GGUF_BITS_PER_WEIGHT:
        return []
    for qtype in ("q8_0", "q6_k", "q5_k_m", "q4_k_m"):
        smaller = _replan(plan, bandwidths, quantization=qtype)
        if smaller.weight_bytes < plan.weight_bytes and _gpu_ok(smaller):
            return [
                f"a {qtype.upper()} GGUF file of this model: weights {format_bytes(plan.weight_bytes)} -> "
                f"{format_bytes(smaller.weight_bytes)}" + (" and fits" if smaller.fits else "")
            ]
    return []


def advise(plan: MemoryPlan, bandwidths: Bandwidths) -> list[str]:
    """Lines that say what to change, with numbers; empty when the plan fits."""
    if plan.fits:
        return []
    r, kvpt = plan.request, plan.kv_bytes_per_token
    lines = [
        f"{format_tokens(plan.context_len)} tokens x {format_bytes(kvpt)}/token = "
        f"{format_bytes(plan.context_len * kvpt)} of KV; the tiers hold {plan.max_context} tokens "
        f"(gpu {plan.gpu_kv_tokens}, cpu {plan.cpu_kv_tokens}, disk {plan.disk_kv_tokens})"
    ]
    if plan.max_context > 0:
        lines.append(
            f"max context that fits now: {plan.max_context} tokens (--max-model-len {plan.max_context})"
        )
    if r.gpu_kv_blocks is not None or r.cpu_kv_blocks is not None or r.disk_kv_blocks is not None:
        # Exact block counts override the budgets: no budget change would move them.
        lines.append(
            "the tier sizes were set in blocks (--num-kv-blocks, --num-cpu-kv-blocks, ...): raise those"
        )
        return lines
    gpu_ok = _gpu_ok(plan)
    lines += _tier_advice(plan, bandwidths) if gpu_ok else _gpu_advice(plan, bandwidths)
    fp8 = _replan(plan, bandwidths, kv_dtype="fp8") if r.kv_dtype_bytes > 1 else plan
    if fp8.max_context > plan.max_context:
        lines.append(
            f"--kv-cache-dtype fp8: KV {format_bytes(kvpt)} -> {format_bytes(fp8.kv_bytes_per_token)} per token, "
            f"max context {fp8.max_context} tokens" + (" (fits)" if fp8.fits else "")
        )
    return lines


def notes_for(plan: MemoryPlan) -> list[str]:
    """Things worth knowing about a plan that are not failures."""
    r, notes = plan.request, []
    if plan.context_len > r.spec.max_position_embeddings:
        past = f"context {plan.context_len} is past the model's {r.spec.max_position_embeddings} positions"
        notes.append(
            f"{past}: it needs --rope-scaling"
            if r.rope_scaling is None
            else f"{past}: --rope-scaling {r.rope_scaling} extends them (measure it: kvspill eval)"
        )
    if plan.fits and r.max_num_seqs > plan.max_concurrent_seqs:
        notes.append(
            f"sequences of {plan.context_len} tokens that fit at once: {plan.max_concurrent_seqs} "
            f"(of --max-num-seqs {r.max_num_seqs}); the others wait"
        )
    if (  # a fixed block count sets the size itself: then nothing was "left"
        r.gpu_kv_blocks is None
        and r.gpu_kv_budget_bytes is not None
        and plan.gpu_kv_bytes + plan.block_bytes <= r.gpu_kv_budget_bytes
    ):
        notes.append(
            f"a fixed GPU KV of {format_bytes(r.gpu_kv_budget_bytes)} was asked; "
            f"{format_bytes(plan.gpu_kv_bytes)} is left after weights and reserves"
        )
    if r.cold_attention == "sparse":
        cold = plan.placed_cpu_tokens + plan.placed_disk_tokens
        notes.append(
            f"--cold-attention sparse: decode reads {format_tokens(min(cold, r.sparse_budget_tokens))} of "
            f"{format_tokens(cold)} cold tokens per step; the cold blocks' key summaries take "
            f"{format_bytes(plan.summary_bytes)} of the GPU ({plan.decode.summary_s * 1e3:.2g} ms a step to scan)"
            + (
                f"; {r.sparse_cache_seqs} sequence(s) keep their chosen blocks cached there "
                f"({format_bytes(plan.sparse_cache_bytes)}, --sparse-cache-seqs)"
                if plan.sparse_cache_bytes
                else ""
            )
        )
        eager = sparse_eager_reason(plan.choices, plan.placed_disk_tokens) if plan.choices else None
        if eager is not None and r.device == "cuda":
            notes.append(
                f"--cold-attention sparse: decode steps run without CUDA graphs ({eager}), "
                "2-3x slower than with them"
            )
    return notes


def _weights_cell(plan: MemoryPlan) -> str:
    r = plan.request
    kind = r.quantization
    if kind == "none" or (kind == "gguf" and r.spec.stored_weight_bytes is None):  # dense: its dtype
        kind = {1: "fp8", 2: "bf16/fp16", 4: "fp32"}.get(r.weight_dtype_bytes, r.weight_dtype)
    cell = f"{format_bytes(plan.weight_bytes)} {kind}"
    if r.scale_pair_bytes:  # kept for batched steps (arithmetic.compute_plan decides)
        cell += f" ({format_bytes(r.scale_pair_bytes)} of it scale pairs)"
    if plan.offloaded_weight_bytes:
        cell += f" + {format_bytes(plan.offloaded_weight_bytes)}"
    return cell


def _offload_advice(plan: MemoryPlan, bandwidths: Bandwidths) -> list[str]:
    """The fewest whole layers in pinned RAM (--cpu-offload-gb) that let the GPU hold the rest."""
    r = plan.request
    if r.measured_weight_bytes is not None or r.quantization != "none":
        return []
    for layers in range(r.offloaded_layers + 1, r.spec.num_layers + 1):
        gib = math.ceil(layers * r.layer_weight_bytes / GiB * 10) / 10
        offloaded = _replan(plan, bandwidths, cpu_offload_bytes=int(gib * GiB))
        if _gpu_ok(offloaded):
            return [
                f"--cpu-offload-gb {gib:g}: {offloaded.request.offloaded_layers} layers "
                f"({format_bytes(offloaded.offloaded_weight_bytes)}) in pinned RAM, copied in every step: "
                f"decode {offloaded.decode_tok_s:.3g} tok/s" + (" and fits" if offloaded.fits else "")
            ]
    return []


def figure_source(plan: MemoryPlan) -> str:
    """Where the plan's speed figures come from, in a few words: measured (how, when), or defaults."""
    bw = plan.bandwidths
    on_cpu = plan.request.device == "cpu"
    used = list(CPU_RATE_FIELDS) if on_cpu else ["hbm_gbs", "gpu_tflops"]  # weights and KV, matmuls
    if plan.placed_cpu_tokens or plan.placed_disk_tokens:
        used += ["disk_read_gbs"] if on_cpu else ["h2d_gbs", "stream_gbs", "cpu_attn_gbs", "disk_read_gbs"]
    measured_at = bw.cpu_rates_at if on_cpu else bw.measured_at
    if measured_at is None:
        if bw.source.startswith("defaults") or on_cpu:
            return "default, not measured: kvspill doctor --calibrate"
        return f"{bw.gpu_name or 'known card'} figures, not measured here: kvspill doctor --calibrate"
    defaulted = [name for name in used if name in bw.filled]
    if defaulted:
        return f"default {', '.join(defaulted)}, not measured: kvspill doctor --calibrate"
    quick = on_cpu and "quick measurement" in bw.source
    return f"measured: {'quick measurement' if quick else 'kvspill doctor --calibrate'}, {measured_at[:10]}"


def _tiers(plan: MemoryPlan) -> list[tuple[str, str]]:
    ctx = format_tokens(plan.context_len)
    r = plan.request
    d = plan.decode
    reserves = plan.reserve_bytes
    kv_name = (
        "int8 + scales" if r.kv_dtype == "int8" else {1: "fp8", 2: "bf16/fp16", 4: "fp32"}[r.kv_dtype_bytes]
    )
    if r.kv_skip_layers and r.kv_dtype != "auto":
        kv_name += f", {min(r.kv_skip_layers, r.spec.num_layers)} layers kept"
    on_cpu = r.device == "cpu"  # the engine on the CPU: its "gpu" tier is the KV pool in RAM
    source = figure_source(plan)
    return [
        (
            "RAM planned / available" if on_cpu else "VRAM planned / budget",
            f"{format_bytes(plan.usable_vram_bytes)} / {format_bytes(r.vram_budget_bytes)}",
        ),
        ("weights in RAM" if on_cpu else "weights on GPU (+ offloaded to RAM)", _weights_cell(plan)),
        ("KV per token", f"{format_bytes(plan.kv_bytes_per_token)} {kv_name}"),
        (
            f"step transients ({format_tokens(r.max_num_batched_tokens)} tok, {r.max_num_seqs} seqs)",
            format_bytes(plan.activation_peak_bytes),
        ),
        ("reserves" if on_cpu else "graphs+slack+runtime+RoPE", format_bytes(reserves)),
        (
            "KV pool in RAM" if on_cpu else "GPU KV tier",
            f"{format_bytes(plan.gpu_kv_bytes)} {format_tokens(plan.gpu_kv_tokens)} tok",
        ),
        ("CPU KV tier", f"{format_bytes(plan.cpu_kv_bytes)} {format_tokens(plan.cpu_kv_tokens)} tok"),
        ("disk KV tier", f"{format_bytes(plan.disk_kv_bytes)} {format_tokens(plan.disk_kv_tokens)} tok"),
        ("max context (1 seq)", format_tokens(plan.max_context)),
        # columns may plan different contexts (the modes): the context is a row, not a label
        ("context (RoPE scaling)", ctx + (f" ({r.rope_scaling})" if r.rope_scaling else "")),
        ("max seqs @ context", str(plan.max_concurrent_seqs)),
        (
            f"{'pool' if on_cpu else 'gpu'}/cpu/disk @ context",
            "/".join(
                format_tokens(n)
                for n in (plan.placed_gpu_tokens, plan.placed_cpu_tokens, plan.placed_disk_tokens)
            ),
        ),
        (f"TTFT @ context ({source})", f"{plan.ttft_s:.3g} s" if plan.fits else "-"),
        (f"decode @ context ({source})", f"{plan.decode_tok_s:.3g} tok/s" if plan.fits else "-"),
        _batched_row(plan),
        (
            "cold split stream/cpu",
            f"{d.stream_fraction:.0%}/{1 - d.stream_fraction:.0%}"
            if not on_cpu and (d.streamed_bytes or d.cpu_attn_bytes)
            else "-",
        ),
        _step_row(d, on_cpu),
        ("fits", "yes" if plan.fits else "NO"),
    ]


def _batched_row(plan: MemoryPlan) -> tuple[str, str]:
    """Tokens a second with as many sequences of the context decoding at once as --max-num-seqs
    allows and fit (plan/batched.py); "-" where that is one, or not predicted."""
    step = max_seqs_decode(plan)
    if step is None:
        return "decode @ max seqs, in all", "-"
    return (
        "decode @ max seqs, in all",
        f"{step.tok_s:,.0f} tok/s ({step.num_seqs} x {step.tok_s / step.num_seqs:.3g})",
    )


def _step_row(d: DecodeFloor, on_cpu: bool) -> tuple[str, str]:
    """A decode step's milliseconds by part; on the CPU the last is the layers' fixed cost."""
    label = "step ms weights+kv+cold+disk+layers" if on_cpu else "step ms w+gpu+cold+disk+launch"
    # launch: with tensor parallelism, the collectives too
    parts = (d.weights_s, d.gpu_kv_s, d.cold_kv_s, d.disk_read_s, d.overhead_s + d.collective_s)
    # a stream graph reads the weights and gpu KV beneath its gather (costs.decode_floor)
    hidden = f" -{d.overlap_s * 1e3:.3g} hidden" if d.overlap_s else ""
    return label, "+".join(f"{s * 1e3:.3g}" for s in parts) + hidden


def format_plan_table(
    plans: Mapping[str, MemoryPlan] | Sequence[MemoryPlan], with_advice: bool = True
) -> str:
    """Plans side by side, one column each, then advice for those that do not fit."""
    items = list(plans.values()) if isinstance(plans, Mapping) else list(plans)
    if not items:
        return ""
    columns = [_tiers(p) for p in items]
    label_width = max(len(label) for label, _ in columns[0])
    widths = [max(len(p.preset), *(len(v) for _, v in col)) for p, col in zip(items, columns, strict=True)]
    spec = items[0].request.spec
    lines = [
        f"model {spec.name or spec.architecture}: {spec.num_params / 1e9:.3g}B params, {spec.num_layers} layers, "
        f"{spec.num_kv_heads}x{spec.head_dim} KV heads"
    ]
    lines.append(
        " ".join([" " * label_width] + [p.preset.rjust(w) for p, w in zip(items, widths, strict=True)])
    )
    for row, (label, _) in enumerate(columns[0]):
        cells = [col[row][1].rjust(w) for col, w in zip(columns, widths, strict=True)]
        lines.append(" ".join([label.ljust(label_width)] + cells))
    lines.append(f"bandwidths: {items[0].bandwidths.source}")
    # Budgets on the command line take either unit (16GB = 16e9 bytes, 16GiB = 16 x 2^30).
    lines.append("sizes: binary units, 1 GiB = 2^30 bytes = 1.074 GB (so 16GB = 14.9 GiB)")
    if with_advice:
        for plan in items:
            lines += [f"note ({plan.preset}): {n}" for n in plan.notes]
            if not plan.fits:
                lines.append(f"{plan.preset} does not fit:")
                lines += [f"  - {a}" for a in plan.advice]
    return "\n".join(lines)


def plan_to_json(plan: MemoryPlan) -> dict[str, Any]:
    """The plan as a JSON-ready dict: every field, plus derived figures named with units."""
    data = asdict(plan)
    data["decode"]["total_s"] = plan.decode.total_s
    data["request"]["spec"]["num_params"] = plan.request.spec.num_params
    data["request"]["weight_dtype_bytes"] = plan.request.weight_dtype_bytes
    data["request"]["kv_dtype_bytes"] = plan.request.kv_dtype_bytes
    data["bandwidths"]["filled"] = list(plan.bandwidths.filled)  # JSON has lists, not tuples
    data["request"]["spec"]["rope_scaling"] = dict(plan.request.spec.rope_scaling)  # pairs -> object
    data["request"]["spec"]["gguf_matmul_type_bytes"] = dict(plan.request.spec.gguf_matmul_type_bytes)
    data["figure_source"] = figure_source(plan)  # TTFT and decode: measured (how) or defaults
    step = max_seqs_decode(plan)  # several sequences at once (plan/batched.py); None: not predicted
    data["max_seqs_decode"] = (
        None if step is None else {**asdict(step), "step_s": step.step_s, "tok_s": step.tok_s}
    )
    return data
