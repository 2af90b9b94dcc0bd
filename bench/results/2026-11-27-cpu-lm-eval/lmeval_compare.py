"""lm-eval's loglikelihoods (local-completions against kvspill serve) against the engine's own
prompt logprobs for the same token ids (lm-eval's pair encoding: whole = tok(ctx + cont),
continuation = whole[len(tok(ctx)):])."""
import glob, json, sys
from transformers import AutoTokenizer
from kvspill.llm import LLM
from kvspill.sampling_params import SamplingParams
tok = AutoTokenizer.from_pretrained("/work/main/.devbench/smol_tok")
llm = LLM()  # the embedded default model, as `kvspill serve` loads it
worst, n = 0.0, 0
for line in open(glob.glob("/tmp/lmeval_out/SmolLM2-135M-Instruct/samples_*.jsonl")[0]):
    s = json.loads(line)
    for k, args in enumerate(s["arguments"].values()):
        ctx, cont = args["arg_0"], args["arg_1"]
        whole = tok(ctx + cont, add_special_tokens=False)["input_ids"]
        ctx_ids = tok(ctx, add_special_tokens=False)["input_ids"]
        cont_ids = whole[len(ctx_ids):]
        out = llm.generate([ctx_ids + cont_ids], SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0))[0]
        mine = sum(e.logprob for e in out.prompt_logprobs[len(ctx_ids):])
        theirs = float(s["resps"][k][0][0])
        worst = max(worst, abs(mine - theirs)); n += 1
        print(f"{ctx[:40]!r:44} {cont!r:12} lm-eval {theirs:9.5f} engine {mine:9.5f}")
print("pairs", n, "max |difference|", worst)
