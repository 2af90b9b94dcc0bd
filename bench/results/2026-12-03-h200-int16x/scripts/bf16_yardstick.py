"""The embedded model in bf16 against fp32 compute (the yardstick beside int16x_quality): python3 bf16_yardstick.py"""
import torch, json
from kvspill.bench.kv_quality import StoredKVAttention, compare, stdlib_text, teacher_forced
from kvspill.bench.int16x_quality import perplexity
from kvspill.model.loader import load_model
from kvspill.model.resolve import resolve_model
from kvspill.text.tokenizer import load_tokenizer
r = resolve_model(None)
ids = load_tokenizer(r).encode(stdlib_text())[:2048]
a = StoredKVAttention(None, set())
ref = teacher_forced(load_model(r, torch.device("cpu"), torch.float32, keep_quantized=True).model, ids, a)
bf = teacher_forced(load_model(r, torch.device("cpu"), torch.bfloat16, keep_quantized=True).model, ids, a)
print(json.dumps({**compare(ref, bf), "ppl32": perplexity(ref, ids), "ppl_bf16": perplexity(bf, ids)}))
