"""Dev only: kvspill.bench with the lm_head in fp8 too (per-row scales), to size that option's gain."""
import sys
from kvspill.model import random_init, fp8
orig = random_init.install_fp8_modules
def with_head(net, dtype):
    n = orig(net, dtype)
    net.lm_head = fp8.Fp8Linear(net.model.embed_tokens.embedding_dim, [net.model.embed_tokens.num_embeddings], False, dtype)
    return n
random_init.install_fp8_modules = with_head
from kvspill.bench.engine_bench import main
sys.argv = ["kvspill.bench"] + sys.argv[1:]
sys.exit(main())
