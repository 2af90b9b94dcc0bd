"""The embedded model's time to first token on the CPU, one tree (the one on PYTHONPATH).

    PYTHONPATH=TREE python ttft.py LABEL [--dtype float16]

Random prompts of 128 / 512 / 2048 tokens (seeded), one new token, prefix caching off; prints
one JSON line with each prompt's seconds and the greedy first token."""

from __future__ import annotations

import argparse
import json
import time

import torch

from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("label")
    ap.add_argument("--dtype", default="float16")
    args = ap.parse_args()
    llm = LLM(None, device="cpu", max_model_len=4096, enable_prefix_caching=False, dtype=args.dtype)
    params = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    llm.generate([[100] * 64], params)  # warm-up
    row: dict[str, object] = {"label": args.label, "dtype": args.dtype}
    for n in (128, 512, 2048):
        prompt = torch.randint(100, 40000, (n,), generator=torch.Generator().manual_seed(n)).tolist()
        start = time.perf_counter()
        token = llm.generate([prompt], params)[0].token_ids[0]
        row[f"ttft_s_{n}"] = round(time.perf_counter() - start, 3)
        row[f"first_token_{n}"] = token
    print(json.dumps(row))


if __name__ == "__main__":
    main()
