"""CPU decode speed of the embedded model: kvspill vs transformers `generate()`, one run.

    python -m kvspill.bench.cpu_vs_hf [--new-tokens 128] [--threads N] [--out FILE]

Same prompt, same thread count, greedy, EOS ignored so both produce exactly `--new-tokens`.
Decode tok/s = (new_tokens - 1) / (time of the whole generation - time to the first token),
measured for each system the same way. transformers runs in its default dtype for a GGUF
(float32) and again in kvspill's dtype, so the ratio is shown both ways.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import platform
import sys
import time

import torch

PROMPT = "Write a Python function that checks whether a string is a palindrome, with tests."


def _hf_decode_tok_s(model: object, prompt: list[int], new_tokens: int) -> tuple[float, float]:
    ids = torch.tensor([prompt])
    kwargs = dict(attention_mask=torch.ones_like(ids), do_sample=False, eos_token_id=None, pad_token_id=2)

    def gen(n: int) -> float:
        t = time.perf_counter()
        with torch.inference_mode():
            model.generate(ids, max_new_tokens=n, min_new_tokens=n, **kwargs)  # type: ignore[attr-defined]
        return time.perf_counter() - t

    gen(4)  # warm-up
    ttft = gen(1)
    total = gen(new_tokens)
    return ttft, (new_tokens - 1) / (total - ttft)


def _kvspill_decode_tok_s(llm: object, prompt: list[int], new_tokens: int) -> tuple[float, float]:
    from kvspill.sampling_params import SamplingParams

    def gen(n: int) -> float:
        t = time.perf_counter()
        llm.generate([prompt], SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))  # type: ignore[attr-defined]
        return time.perf_counter() - t

    gen(4)
    ttft = gen(1)
    total = gen(new_tokens)
    return ttft, (new_tokens - 1) / (total - ttft)


def main(argv: list[str] | None = None) -> int:
    from transformers import AutoModelForCausalLM

    from kvspill.llm import LLM
    from kvspill.plan.spec import embedded_gguf_path

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--out", default=None, help="append one JSON line here")
    args = ap.parse_args(argv)
    if importlib.util.find_spec("accelerate") is None:  # transformers' GGUF loader needs it; kvspill does not
        print(
            "cpu_vs_hf runs transformers beside kvspill; its GGUF loader needs accelerate: pip install accelerate"
        )
        return 2
    torch.set_num_threads(args.threads)

    gguf = embedded_gguf_path()
    llm = LLM(None, device="cpu", max_model_len=2048)
    dtype = llm.engine.bundle.dtype
    prompt = llm.chat_prompt([{"role": "user", "content": PROMPT}])
    rows = []
    ttft, ours = _kvspill_decode_tok_s(llm, prompt, args.new_tokens)
    rows.append(("kvspill", str(dtype).removeprefix("torch."), ttft, ours))
    for hf_dtype in (torch.float32, dtype):
        hf = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=hf_dtype
        ).eval()
        ttft, tok_s = _hf_decode_tok_s(hf, prompt, args.new_tokens)
        rows.append(("transformers", str(hf_dtype).removeprefix("torch."), ttft, tok_s))
        del hf
        if hf_dtype == dtype:
            break
    result = dict(
        date=datetime.date.today().isoformat(),
        cpu=platform.processor() or platform.machine(),
        threads=args.threads,
        prompt_tokens=len(prompt),
        new_tokens=args.new_tokens,
        rows=[dict(system=s, dtype=d, ttft_s=round(t, 4), decode_tok_s=round(r, 2)) for s, d, t, r in rows],
        speedup_vs_hf_default=round(ours / rows[1][3], 2),
        speedup_vs_hf_same_dtype=round(ours / rows[-1][3], 2),
    )
    print(f"{'system':<14}{'dtype':<10}{'TTFT s':>8}{'decode tok/s':>14}")
    for s, d, t, r in rows:
        print(f"{s:<14}{d:<10}{t:>8.3f}{r:>14.1f}")
    print(
        f"speed-up: {result['speedup_vs_hf_default']}x vs transformers default (float32), "
        f"{result['speedup_vs_hf_same_dtype']}x vs transformers in {rows[0][1]}"
    )
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
