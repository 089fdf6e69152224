#!/usr/bin/python3
"""Collect a scaling sweep (jobs/sweep.sh): OUTDIR/nodes-N.jsonl for each node count -> OUTDIR/sweep.csv
and OUTDIR/sweep.png (tokens/s and scaling efficiency against nodes).

    jobs/sweep_collect.py OUTDIR 1 2 4

tokens/s of a run: the median over its steps after the first 5 (start-up and first-step allocation
excluded). Efficiency at N nodes: tokens/s(N) / (tokens/s(N0) * N / N0), N0 the smallest count.
"""
import csv
import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def run_figures(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    steps = [r for r in rows if "tokens_per_s" in r]
    if len(steps) < 7:
        sys.exit(f"sweep_collect: {path}: {len(steps)} steps, need at least 7")
    timed = steps[5:]
    return statistics.median(r["tokens_per_s"] for r in timed), statistics.median(r["step_ms"] for r in timed)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, counts = sys.argv[1], sorted(int(n) for n in sys.argv[2:])
    table = []
    for n in counts:
        tps, step_ms = run_figures(f"{out}/nodes-{n}.jsonl")
        table.append({"nodes": n, "tokens_per_s": tps, "step_ms": step_ms})
    base = table[0]
    for row in table:
        ideal = base["tokens_per_s"] * row["nodes"] / base["nodes"]
        row["efficiency"] = row["tokens_per_s"] / ideal
    with open(f"{out}/sweep.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["nodes", "tokens_per_s", "step_ms", "efficiency"])
        w.writeheader()
        for row in table:
            w.writerow({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in row.items()})
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    xs = [r["nodes"] for r in table]
    a.plot(xs, [r["tokens_per_s"] for r in table], "o-", label="measured")
    a.plot(xs, [base["tokens_per_s"] * n / base["nodes"] for n in xs], "--", color="grey", label="linear")
    a.set_xlabel("nodes")
    a.set_ylabel("tokens/s")
    a.legend()
    b.plot(xs, [100 * r["efficiency"] for r in table], "o-")
    b.set_xlabel("nodes")
    b.set_ylabel("scaling efficiency (%)")
    b.set_ylim(0, 110)
    for ax in (a, b):
        ax.set_xticks(xs)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(f"{out}/sweep.png", dpi=90)
    for row in table:
        print(f"sweep: {row['nodes']} node(s): {row['tokens_per_s']:.0f} tokens/s, {row['step_ms']:.1f} ms/step, "
              f"efficiency {100 * row['efficiency']:.0f}%")
    print(f"sweep: {out}/sweep.csv, {out}/sweep.png")


if __name__ == "__main__":
    main()
