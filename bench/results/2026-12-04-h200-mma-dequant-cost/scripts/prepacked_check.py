"""Under TRITON_INTERPRET=1, with prepacked_scales.diff applied: the words form with pack_scales
against HEAD's and the fp64 product of the dequantized weights (error / largest output)."""
import torch
from kvspill.kernels.gguf_formats import random_quantized, dequantize_ref
from kvspill.kernels.gguf_mma import quant_matmul_mma
from kvspill.kernels.gguf_mma_words import pack_scales
from kvspill.kernels.gguf_mma_configs import MmaConfig
torch.manual_seed(0)
for rows, k, tokens in ((64, 512, 8), (96, 1024, 3), (32, 256, 5)):
    w = random_quantized("Q4_K", rows, k)
    x = torch.randn(tokens, k, dtype=torch.float32)
    ref = x.double() @ dequantize_ref(w.data, "Q4_K", k).double().T
    cfgs = [MmaConfig(block_n=32, num_warps=2, split_k=2, num_stages=1, words=True, two_acc=True), MmaConfig(block_n=16, num_warps=4, split_k=1, words=True)]
    for cfg in cfgs:
        a = quant_matmul_mma(x, w, config=cfg)
        b = quant_matmul_mma(x, w, config=cfg, scales=pack_scales(w.data, k, torch.bfloat16))
        scale = ref.abs().max().item()
        print(rows, k, tokens, cfg.block_n, "head err", round((a.double() - ref).abs().max().item() / scale, 6), "prepacked err", round((b.double() - ref).abs().max().item() / scale, 6))
