"""Pool paired code-task samples over seeds 0-5: python3 pool.py code-exact-4096-s{} code-sparse8-4096-s{} code-sparse16-4096-s{}
(same answer and prompt length) are counted once (the first seed's)."""
import json, sys
def load(pattern):
    out = {}
    for s in range(6):
        d = json.load(open(pattern.format(s) + "/eval.json"))
        for x in d["samples"]:
            out[(s, x["index"])] = (x["score"], x["output"], tuple(x["answers"]), x["num_prompt_tokens"])
    return out
exact = load(sys.argv[1])
seen, keep = set(), []
for k, (_, _, ans, n) in sorted(exact.items()):
    if (ans, n) not in seen:
        seen.add((ans, n)); keep.append(k)
print(f"{len(exact)} samples, {len(keep)} distinct")
for pat in sys.argv[2:]:
    other = load(pat)
    for label, keys in (("all", list(exact)), ("distinct", keep)):
        n = len(keys); e = sum(exact[k][0] for k in keys); o = sum(other[k][0] for k in keys)
        lost = sum(exact[k][0] > other[k][0] for k in keys); won = sum(other[k][0] > exact[k][0] for k in keys)
        same = sum(exact[k][1] == other[k][1] for k in keys)
        print(f"{pat.split('/')[-1]:<24} {label:>8} n={n}: exact {100*e/n:.1f} other {100*o/n:.1f} gap {100*(o-e)/n:+.1f} | lost {lost} won {won} same output {same}")
