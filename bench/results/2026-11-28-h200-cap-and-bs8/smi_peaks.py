"""Peak card memory (nvidia-smi, MiB) within each bench row's span: smi.txt rows.txt"""
import sys
samples = []
for line in open(sys.argv[1]):
    parts = line.split()
    if len(parts) == 2 and parts[1].isdigit():
        samples.append((float(parts[0]), int(parts[1])))
start = None
for line in open(sys.argv[2]):
    word, t, *rest = line.split(maxsplit=2)
    if word == "start":
        start, label = float(t), rest[0].strip() if rest else ""
    elif start is not None:
        inside = [m for ts, m in samples if start <= ts <= float(t)]
        peak = max(inside) if inside else None
        print(f"peak {peak} MiB ({peak / 1024:.2f} GiB)" if peak else "no samples", f"over {len(inside)} samples:", label[:90])
        start = None
