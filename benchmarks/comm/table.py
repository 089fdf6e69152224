#!/usr/bin/env python3
"""Prints the bench_comm results of run.sh (np{2,8}_{block,poll}.json in a folder) as a Markdown table."""
import json
import os
import sys


def load(path):
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        data = json.load(f)
    runs = {}
    for b in data["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration":
            continue
        name, size = b["name"].split("/")[:2]
        scale = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}[b.get("time_unit", "ns")]
        runs[(name, int(size))] = (b["real_time"] * scale, b.get("bytes_per_second", 0.0))
    return runs


def size_name(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def cell(r):
    if r is None:
        return "-"
    us, bps = r
    return f"{us:,.0f} us, {bps / 2**20:,.0f} MiB/s" if us >= 100 else f"{us:,.1f} us, {bps / 2**20:,.0f} MiB/s"


def ratio(block, poll):
    return f"{poll[0] / block[0]:.2f}" if block and poll else "-"


def main(folder):
    res = {(np, w): load(os.path.join(folder, f"np{np}_{w}.json")) for np in (2, 8) for w in ("block", "poll")}
    keys = sorted({k for r in res.values() for k in r}, key=lambda k: (k[0], k[1]))
    print("| benchmark | size | 2 ranks block | 2 ranks poll | poll/block | 8 ranks block | 8 ranks poll | poll/block |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for k in keys:
        row = [k[0].removeprefix("BM_"), size_name(k[1])]
        for np in (2, 8):
            b, p = res[(np, "block")].get(k), res[(np, "poll")].get(k)
            row += [cell(b), cell(p), ratio(b, p)]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
