"""Why the mixed replay differs from the eager step on CUDA: A = replay, B = the graph's model run eagerly on
the same static buffers, C = the normal eager step. Tiny random Llama (tests' fixture shapes), float32."""
import sys, torch
sys.path.insert(0, "tests")
from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams
from kvspill.runner.mixed_graphs import run_mixed_model, mixed_sample_index
import conftest
from pathlib import Path
import tempfile
d = Path(tempfile.mkdtemp())
conftest_fn = getattr(conftest.tiny_llama_dir, "__wrapped__", None) or conftest.tiny_llama_dir.__pytest_wrapped__.obj
class F:
    def mktemp(self, name): p = d / name; p.mkdir(); return p
model_dir = conftest_fn(F())
for eager_async in (True, False):
    llm = LLM(str(model_dir), dtype="float32", max_model_len=1024, max_num_batched_tokens=2048, async_scheduling=eager_async)
    runner = llm.engine.bundle.runner
    mixed = runner.mixed_graphs
    real_run = mixed.run
    n = {"k": 0}
    def run(inputs, feed=None):
        out = real_run(inputs, feed)
        if out is not None and n["k"] < 4:
            n["k"] += 1
            A = out[0].clone()
            bucket = next(b for b in mixed.buckets if b >= inputs.num_decodes)
            logits, _ = run_mixed_model(mixed.model, mixed.storage, mixed.scale, (mixed.i64, mixed.i32), bucket, mixed.shape)
            B = logits[mixed_sample_index(inputs, bucket)]
            runner.mixed_graphs = None
            C, _ = runner._forward(inputs, feed)
            runner.mixed_graphs = mixed
            nd = inputs.num_decodes
            print(f"async={eager_async} nd={nd} prefills={len(inputs.req_ids)-nd} chunk={inputs.num_tokens-nd} bucket={bucket} samples={inputs.sample_rows} feed={feed is not None}",
                  "A-B", (A - B).abs().amax(dim=1).tolist(), "B-C", (B - C).abs().amax(dim=1).tolist(), "|C|", C.abs().amax().item(), flush=True)
        return out
    mixed.run = run
    gen = torch.Generator().manual_seed(3)
    prompts = [torch.randint(5, 250, (m,), generator=gen).tolist() for m in (300, 700, 520, 900)]
    llm.generate(prompts, SamplingParams(temperature=0, max_tokens=16, ignore_eos=True))
    llm.close()
