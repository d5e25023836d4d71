#!/usr/bin/env python3
"""Per-layer means of a step trace report (cuda/step_trace.rs, graph-<n>.txt).

The report lists every stamped launch of the replayed graph in order with its mean share (us).
This splits that sequence into layers, groups the layers by their kernel sequence (a hybrid
model has several), and prints each group's mean share per position, so a table per layer
type comes straight from the report:

    python3 trace_layers.py graph-0.txt                     # layers start where the first does
    python3 trace_layers.py graph-0.txt --start 'n1w8d 512' --start 'n1w8d 448'

A layer starts at every launch whose "kernel grid" text matches one of the --start regular
expressions; by default, at every launch named exactly as the first one after the first
`rms_norm*` launch (the first layer's first kernel). Launches before the first start are the
prologue, those after the last layer's pattern stay in it (the LM head and sampling show as the
tail of the last layer).
"""
import argparse
import re
import sys
from collections import OrderedDict


def read_sequence(path):
    """(name, us) per launch, in order, from the report's index section."""
    seq, on = [], False
    with open(path) as f:
        for line in f:
            if line.startswith("index "):
                on = True
                continue
            if on and line.strip():
                parts = line.split()
                seq.append((" ".join(parts[1:-1]), float(parts[-1])))
    return seq


def default_start(seq):
    """The first kernel after the first rms_norm launch, matched exactly."""
    for i, (name, _) in enumerate(seq):
        if name.startswith("rms_norm") and i + 1 < len(seq):
            return [re.escape(seq[i + 1][0]) + "$"]
    sys.exit("no rms_norm launch: pass --start")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report")
    ap.add_argument("--start", action="append", help="regex of a layer's first launch")
    args = ap.parse_args()
    seq = read_sequence(args.report)
    if not seq:
        sys.exit(f"{args.report}: no launch sequence")
    starts = [re.compile(s) for s in (args.start or default_start(seq))]
    begins = [i for i, (n, _) in enumerate(seq) if any(r.search(n) for r in starts)]
    if not begins:
        sys.exit("no launch matches --start")
    groups = OrderedDict()  # kernel-name tuple -> list of per-position share lists
    for k, b in enumerate(begins):
        e = begins[k + 1] if k + 1 < len(begins) else len(seq)
        layer = seq[b:e]
        groups.setdefault(tuple(n for n, _ in layer), []).append([us for _, us in layer])
    prologue = sum(us for _, us in seq[: begins[0]])
    print(f"{args.report}: {len(seq)} launches, {len(begins)} layers, prologue {prologue:.1f} us")
    for names, layers in groups.items():
        total = sum(sum(l) for l in layers) / len(layers)
        print(f"\n{len(layers)} layers of {len(names)} launches, {total:.1f} us each on average")
        for j, name in enumerate(names):
            mean = sum(l[j] for l in layers) / len(layers)
            print(f"  {j:3} {name:56} {mean:9.2f}")


if __name__ == "__main__":
    main()
