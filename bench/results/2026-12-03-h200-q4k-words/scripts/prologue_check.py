"""One-token forwards of a random Llama-3.2-1B-shaped bf16 model (profile_decode's random:llama-1b,
built by model/random_init.build_random_model) with the fused GEMV prologues on or off. The mode
comes from the environment (read once per process), so run it twice and compare the JSON lines:

    KVSPILL_FUSED_PROLOGUE=1 python3 .devbench/s35/prologue_check.py [fp8] [/tmp/on.pt]
    KVSPILL_FUSED_PROLOGUE=0 python3 .devbench/s35/prologue_check.py [fp8] [/tmp/off.pt]
    python3 .devbench/s35/prologue_check.py --diff /tmp/on.pt /tmp/off.pt

Prints per token the logits' checksum and top-5 ids, whether the fused kernels ran (call counts),
and whether a CUDA-graph replay of the forward equals the eager forward bit for bit."""

import json
import os
import sys

import torch

if sys.argv[1:2] == ["--diff"]:
    a, b = torch.load(sys.argv[2]), torch.load(sys.argv[3])
    d = (a - b).abs()
    print(json.dumps({"max_abs_diff": d.max().item(), "rel_norm": (d.norm() / b.norm()).item(),
                      "top1_same": (a.argmax(-1) == b.argmax(-1)).tolist()}))
    sys.exit(0)

from kvspill.model import fp8, layers  # noqa: E402
from kvspill.model.random_init import build_random_model  # noqa: E402

qtype = next((a for a in sys.argv[1:] if not a.endswith(".pt")), "")
save = next((a for a in sys.argv[1:] if a.endswith(".pt")), None)
dev = torch.device("cuda")
model = build_random_model(f"random:llama-1b{':' + qtype if qtype else ''}", dev, torch.bfloat16, 4096).model
g = torch.Generator(device=dev).manual_seed(1)
with torch.no_grad():  # the random fill puts norms at 1: other values show a norm weight read wrongly
    for p in model.parameters():
        if p.dim() == 1:
            p.copy_(1.0 + 0.2 * torch.randn(p.shape, device=dev, generator=g))
calls = {"rms_norm": 0, "silu_mul": 0}
for mod in (layers, fp8):
    for name, key in (("gemv_rms_norm", "rms_norm"), ("gemv_silu_mul", "silu_mul")):
        fn = getattr(mod, name)
        setattr(mod, name, lambda *a, _fn=fn, _k=key, **kw: (calls.__setitem__(_k, calls[_k] + 1), _fn(*a, **kw))[1])


def attention(layer, q, k, v):  # one token, no cache: it attends to itself alone
    return v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)


def forward(ids, pos):
    return model.compute_logits(model(ids, pos, attention))


out, logits_all = [], []
with torch.inference_mode():
    for token, position in [(1, 0), (1000, 37), (128000, 4095)]:
        ids = torch.tensor([token], device=dev)
        pos = torch.tensor([position], device=dev)
        logits = forward(ids, pos)
        graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            forward(ids, pos)  # warm-up off the default stream, as capture wants
            with torch.cuda.graph(graph, stream=stream):
                replayed = forward(ids, pos)
        torch.cuda.current_stream().wait_stream(stream)
        graph.replay()
        torch.cuda.synchronize()
        logits_all.append(logits[0].float().cpu())
        out.append({"token": token, "position": position, "sum": round(logits.float().sum().item(), 4),
                    "abs_sum": round(logits.float().abs().sum().item(), 4),
                    "top5": logits[0].topk(5).indices.tolist(), "graph_equal": torch.equal(replayed, logits)})
mode = os.environ.get("KVSPILL_FUSED_PROLOGUE", "1")
print(json.dumps({"fused_prologue": mode, "qtype": qtype or "bf16", "calls_total": calls, "tokens": out}))
if save:
    torch.save(torch.stack(logits_all), save)
