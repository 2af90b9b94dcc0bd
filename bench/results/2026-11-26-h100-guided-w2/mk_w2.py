"""Dev only: a random-weight Llama-3.2-3B-shaped model dir with SmolLM2's tokenizer (vocab 49152)."""
import json, os, shutil, sys
import torch
from safetensors.torch import save_file
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
H, I, L, NH, NKV, HD, V = 3072, 8192, 28, 24, 8, 128, 49152
cfg = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=H, intermediate_size=I,
           num_hidden_layers=L, num_attention_heads=NH, num_key_value_heads=NKV, head_dim=HD, vocab_size=V,
           max_position_embeddings=131072, rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
           hidden_act="silu", bos_token_id=1, eos_token_id=2, torch_dtype="bfloat16")
json.dump(cfg, open(f"{out}/config.json", "w"))
for f in os.listdir(".devbench/smol_tok"):
    shutil.copy(f".devbench/smol_tok/{f}", out)
g = torch.Generator(device="cuda").manual_seed(0)
def r(*s):
    return (torch.randn(*s, device="cuda", generator=g) * 0.02).to(torch.bfloat16).cpu()
sd = {"model.embed_tokens.weight": r(V, H), "model.norm.weight": torch.ones(H, dtype=torch.bfloat16)}
for i in range(L):
    p = f"model.layers.{i}."
    sd[p + "self_attn.q_proj.weight"] = r(NH * HD, H); sd[p + "self_attn.k_proj.weight"] = r(NKV * HD, H)
    sd[p + "self_attn.v_proj.weight"] = r(NKV * HD, H); sd[p + "self_attn.o_proj.weight"] = r(H, NH * HD)
    sd[p + "mlp.gate_proj.weight"] = r(I, H); sd[p + "mlp.up_proj.weight"] = r(I, H); sd[p + "mlp.down_proj.weight"] = r(H, I)
    sd[p + "input_layernorm.weight"] = torch.ones(H, dtype=torch.bfloat16)
    sd[p + "post_attention_layernorm.weight"] = torch.ones(H, dtype=torch.bfloat16)
save_file(sd, f"{out}/model.safetensors", metadata={"format": "pt"})
print("wrote", out, sum(t.numel() for t in sd.values()) / 1e9, "B params")
