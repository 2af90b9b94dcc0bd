"""Drive a running kvspill server for the issue-50 checks: /health time, first vs second TTFT,
a long request. Prints JSON lines. Usage: client.py PORT wait|ttft|long N"""
import json, random, sys, time, urllib.request

port, what = int(sys.argv[1]), sys.argv[2]
base = f"http://127.0.0.1:{port}"


def post(path, body, timeout=1200):
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=timeout) as r:
        data = json.loads(r.read())
    return time.perf_counter() - t, data


if what == "wait":  # seconds since START (env) until /health is 200
    import os
    start = float(os.environ["START"])
    while True:
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:
                if r.status == 200:
                    print(json.dumps({"health_200_s": round(time.time() - start, 2)}))
                    break
        except Exception:
            pass
        if time.time() - start > 600:
            print(json.dumps({"health_200_s": None})); break
        time.sleep(0.05)
elif what == "ttft":  # first and second request after /health (no shared prefix), 1 new token
    rng = random.Random(int(sys.argv[3]) if len(sys.argv) > 3 else 0)
    model = json.loads(urllib.request.urlopen(base + "/v1/models").read())["data"][0]["id"]
    out = {}
    for i in range(4):
        ids = [rng.randrange(100, 30000) for _ in range(512)]
        s, data = post("/v1/completions", {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0})
        out[f"request_{i + 1}_s"] = round(s, 4)
    print(json.dumps(out))
elif what == "long":
    n = int(sys.argv[3])
    rng = random.Random(1)
    model = json.loads(urllib.request.urlopen(base + "/v1/models").read())["data"][0]["id"]
    ids = [rng.randrange(100, 120000) for _ in range(n)]
    s, data = post("/v1/completions", {"model": model, "prompt": ids, "max_tokens": 32, "temperature": 0, "ignore_eos": True})
    print(json.dumps({"prompt_tokens": n, "seconds": round(s, 2), "usage": data.get("usage"), "finish": data["choices"][0].get("finish_reason")}))
