import json, sys, torch
sys.path.insert(0, ".devbench")
from sweep16 import run
from kvspill.bench.kernels_gguf import random_weight_cuda
v = json.load(open(sys.argv[1]))["best"]
for shape in ((28672, 4096), (6144, 4096)):
    w = random_weight_cuda("Q4_K", *shape)
    x = torch.randn((1, shape[1]), dtype=torch.bfloat16, device="cuda")
    for _ in range(3):
        run(x, w, v)
torch.cuda.synchronize()
