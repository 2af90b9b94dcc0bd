"""CPU decode of the embedded SmolLM2-135M at long context: the host-pool kernel path
(runner/host_decode.py) against the torch reference it replaced, same engine, same prompt.

    python smollm2_decode.py --ctx 4096 8192 --new-tokens 32 --dtype float32

Prompt: Python's own stdlib sources, cut to `ctx` tokens; greedy, EOS ignored. Decode tok/s =
(new_tokens - 1) / (generation time - time to the first token). The reference runs with the
kernel switched off (`runner.attention.load_kernel` returning None), which is what an engine
without a C++ compiler does.
"""

from __future__ import annotations

import argparse
import json
import sysconfig
import time
from pathlib import Path

from kvspill.llm import LLM
from kvspill.runner import attention as attention_module
from kvspill.sampling_params import SamplingParams


def decode_tok_s(llm: LLM, prompt: list[int], new_tokens: int) -> tuple[float, float, list[int]]:
    params = SamplingParams(temperature=0, max_tokens=new_tokens, ignore_eos=True)
    t0 = time.perf_counter()
    first = None
    llm.engine.add_request(prompt, params)
    tokens: list[int] = []
    while llm.engine.has_unfinished_requests():
        for out in llm.engine.step():
            if out.delta_token_ids and first is None:
                first = time.perf_counter()
            tokens.extend(out.delta_token_ids)
    end = time.perf_counter()
    assert first is not None
    return first - t0, (len(tokens) - 1) / (end - first), tokens


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctx", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--out", default="smollm2_decode.jsonl")
    args = ap.parse_args()
    llm = LLM(dtype=args.dtype, max_model_len=8192, enable_prefix_caching=False)
    lib = Path(sysconfig.get_paths()["stdlib"])
    text = "\n".join((lib / name).read_text() for name in ("argparse.py", "textwrap.py", "typing.py", "inspect.py"))
    ids = llm.engine.encode(text)
    real = attention_module.load_kernel
    for ctx in args.ctx:
        prompt = ids[:ctx]
        row = {"ctx": ctx, "dtype": args.dtype, "new_tokens": args.new_tokens}
        for name, loader in (("kernel", real), ("reference", lambda: None)):
            attention_module.load_kernel = loader
            ttft, tok_s, tokens = decode_tok_s(llm, prompt, args.new_tokens)
            row[f"{name}_ttft_s"], row[f"{name}_decode_tok_s"] = round(ttft, 2), round(tok_s, 2)
            row[f"{name}_tokens"] = tokens
        attention_module.load_kernel = real
        row["same_tokens"] = row["kernel_tokens"] == row["reference_tokens"]
        print(json.dumps({k: v for k, v in row.items() if not k.endswith("_tokens")}), flush=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
