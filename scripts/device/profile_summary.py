"""Summarise an `ncu --csv --page raw --metrics gpu__time_duration.sum` log: time per kernel name."""
import csv
import io
import sys
from collections import defaultdict

path, steps = sys.argv[1], int(sys.argv[2])
text = open(path, errors="replace").read()
start = text.find('"ID"')
if start < 0:
    print(f"{path}: no ncu table (see the .err and .ncu.log files)")
    sys.exit(0)
rows = list(csv.DictReader(io.StringIO(text[start:])))
total = defaultdict(float)
count = defaultdict(int)
to_ns = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9}
scale = 1.0
for r in rows:
    v = r.get("gpu__time_duration.sum", "")
    if v in to_ns:
        scale = to_ns[v]  # the units row
        continue
    try:
        t = float(v.replace(",", "")) * scale
    except ValueError:
        continue
    name = r["Kernel Name"].split("(")[0]
    total[name] += t
    count[name] += 1
all_t = sum(total.values())
print(f"{path}: {len(rows)} kernels, {all_t / 1e3:.1f} us in all; per step (/{steps}: prefill and decode steps) below")
print(f"{'kernel':60s} {'calls':>7s} {'us/step':>9s} {'share':>6s} {'us/call':>8s}")
for name, t in sorted(total.items(), key=lambda kv: -kv[1])[:40]:
    print(f"{name[:60]:60s} {count[name]:7d} {t / 1e3 / steps:9.1f} {100 * t / all_t:5.1f}% {t / 1e3 / count[name]:8.2f}")
