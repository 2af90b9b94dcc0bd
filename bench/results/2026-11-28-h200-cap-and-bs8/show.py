import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    print(d["mode"], d["ctx"], "tok/s", d["decode_tok_s"], "ttft", d.get("ttft_s"), "| plan", d.get("plan_decode_tok_s"), d.get("plan_vs_measured"),
          "floor", d.get("floor_tok_s"), d.get("floor_ratio"), "| gpu/cold", [d.get("hot_tokens"), d.get("cold_tokens")],
          "| peak alloc/res", d.get("peak_gpu_gib"), d.get("peak_gpu_reserved_gib"), "card", d.get("card_used_gib"),
          "sized act/rt", d.get("sized_activation_gib"), d.get("sized_runtime_gib"), "| graph", d.get("cold_stream_graph_share"))
