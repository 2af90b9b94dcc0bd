"""Dev only (issue 19): greedy tokens with TP=2 beside TP=1 for dense, fp8 and AWQ int4 weights
of one random Llama checkpoint (hidden 1024, 16 heads / 4 KV heads, MLP 2816: down_proj's 1408
columns per rank are 11 AWQ groups of 128, split on 32-column Q4_1 blocks)."""
import sys, tempfile, time
from pathlib import Path
import torch
sys.path.insert(0, "tests")
from int4_writer import write_int4_checkpoint
from transformers import AutoModelForCausalLM, LlamaConfig
from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams

def main() -> None:
    device = sys.argv[1] if len(sys.argv) > 1 else "cuda"
    dtype = sys.argv[2] if len(sys.argv) > 2 else "bfloat16"
    root = Path(tempfile.mkdtemp())
    cfg = LlamaConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_attention_heads=16,
                      num_key_value_heads=4, num_hidden_layers=4, max_position_embeddings=4096,
                      tie_word_embeddings=False, initializer_range=0.05)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(root / "dense")
    write_int4_checkpoint(root / "dense", root / "awq", "awq", None, 128)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 32000, (n,), generator=gen).tolist() for n in (700, 45, 1500, 300)]
    params = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True, detokenize=False)
    for name, path, quant in (("dense", "dense", "none"), ("fp8", "dense", "fp8"), ("awq", "awq", None)):
        got = {}
        for tp in (1, 2):
            t = time.perf_counter()
            llm = LLM(str(root / path), device=device, dtype=dtype, quantization=quant, max_model_len=2048,
                      skip_tokenizer_init=True, tensor_parallel_size=tp, enable_prefix_caching=False, vram_budget_bytes=16 * 2**30)
            try:
                got[tp] = [o.token_ids for o in llm.generate(prompts, params)]
            finally:
                c = time.perf_counter()
                llm.close(); del llm; import gc; gc.collect(); torch.cuda.empty_cache()
            print(f"{name} tp={tp}: {time.perf_counter() - t:.1f} s, close {time.perf_counter() - c:.2f} s", flush=True)
        same = sum(a == b for a, b in zip(got[1], got[2]))
        agree = [next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a)) for a, b in zip(got[1], got[2])]
        print(f"{name}: TP=2 equals TP=1 on {same}/{len(prompts)} prompts; tokens equal before the first difference: {agree}", flush=True)

if __name__ == "__main__":
    main()
