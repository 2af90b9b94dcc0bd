"""The embedded model's CPU decode speed, one tree (the one on PYTHONPATH), three rounds.

    PYTHONPATH=TREE python ab_decode.py LABEL [--new-tokens 128]

Decode tok/s = new_tokens / (time of a (new_tokens + 1)-token generation - time of a 1-token one):
the prompt's prefill cancels. Greedy, EOS ignored; prints the first greedy tokens so that two
trees can be seen to decode the same."""

from __future__ import annotations

import argparse
import json
import time

from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("label")
    ap.add_argument("--new-tokens", type=int, default=128)
    args = ap.parse_args()
    llm = LLM(None, device="cpu", max_model_len=2048)
    prompt = list(range(100, 164))

    def generate(n: int) -> tuple[float, list[int]]:
        start = time.perf_counter()
        out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))
        return time.perf_counter() - start, out[0].token_ids

    generate(8)  # warm-up
    rounds = []
    for _ in range(3):
        one, _ = generate(1)
        whole, tokens = generate(args.new_tokens + 1)
        rounds.append(round(args.new_tokens / (whole - one), 2))
    print(json.dumps({"label": args.label, "decode_tok_s": rounds, "first_tokens": tokens[:16]}))


if __name__ == "__main__":
    main()
