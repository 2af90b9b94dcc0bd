"""Per-kernel table of an ncu --csv log (calls 36-37): for each (kernel, grid), the calls, the
mean time, DRAM bytes read and L2 bytes a call. Usage: python ncu_table.py FILE.csv[.gz] [TOP]."""

import collections
import csv
import gzip
import sys


def read_rows(path: str) -> list[list[str]]:
    """The CSV rows of an ncu log (its lines before the header are ncu's own messages)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return list(csv.reader(line for line in f if line.startswith('"')))


def main(path: str, top: int) -> None:
    rows = read_rows(path)
    head = rows[0]
    col = {name: head.index(name) for name in ("ID", "Kernel Name", "Grid Size", "Metric Name", "Metric Value")}
    metrics: dict[int, dict[str, float]] = collections.defaultdict(dict)
    kernel: dict[int, tuple[str, str]] = {}
    for r in rows[1:]:
        i = int(r[col["ID"]])
        metrics[i][r[col["Metric Name"]]] = float(r[col["Metric Value"]].replace(",", ""))
        kernel[i] = (r[col["Kernel Name"]][:24], r[col["Grid Size"]])
    sums: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for i, m in metrics.items():
        s = sums[kernel[i]]
        s[0] += 1
        s[1] += m["gpu__time_duration.sum"] / 1e3
        s[2] += m["dram__bytes_read.sum"] / 1e6
        s[3] += m.get("lts__t_bytes.sum", 0.0) / 1e6
    total = sum(s[1] for s in sums.values())
    print(f"{path}: {len(metrics)} kernels, {total:.1f} us")
    print("| kernel | grid | calls | us a call | DRAM MB read a call | L2 MB a call | DRAM GB/s |")
    print("|---|---|---|---|---|---|---|")
    for (name, grid), (n, us, dram, l2) in sorted(sums.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"| {name} | {grid} | {n:.0f} | {us / n:.1f} | {dram / n:.2f} | {l2 / n:.2f} | {dram / us * 1e3:.0f} |")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 12)
