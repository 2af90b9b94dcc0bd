import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    print(d["mode"], d["ctx"], "tok/s", d["decode_tok_s"], "ttft", d.get("ttft_s"), "| plan", d.get("plan_decode_tok_s"), d.get("plan_vs_measured"),
          "placement", d.get("plan_placement"), "engine", [d.get("hot_tokens"), d.get("cold_tokens")],
          "| sized", d.get("sized_plan_decode_tok_s"), d.get("sized_plan_vs_measured"),
          "| graph", d.get("cold_stream_graph_share"), "cpu", d.get("cold_cpu_share"), d.get("cold_cpu_ms_per_token"), "stream_ms", d.get("cold_stream_ms_per_token"))
