"""Paired comparison of two `kvspill eval` runs: python paired.py EXACT_DIR OTHER_DIR [...]"""
import json, sys
from collections import defaultdict

def load(path):
    doc = json.load(open(f"{path}/eval.json"))
    return {(s["task"], s["length"], s["index"]): (s["score"], s["output"]) for s in doc["samples"]}

exact = load(sys.argv[1])
for other_dir in sys.argv[2:]:
    other = load(other_dir)
    stats = defaultdict(lambda: [0, 0.0, 0.0, 0, 0, 0])  # n, exact sum, other sum, only exact, only other, same output
    for key, (score, out) in exact.items():
        if key not in other:
            continue
        o_score, o_out = other[key]
        s = stats[key[:2]]
        s[0] += 1; s[1] += score; s[2] += o_score
        s[3] += score > o_score; s[4] += o_score > score; s[5] += out == o_out
    for (task, length), (n, e, o, only_e, only_o, same) in sorted(stats.items()):
        print(f"{other_dir.split('/')[-1]:>20} {task:>18} @ {length}: n={n} exact {100*e/n:.1f} other {100*o/n:.1f} "
              f"gap {100*(e-o)/n:+.1f} | better exact {only_e}, better other {only_o}, same output {same}")
