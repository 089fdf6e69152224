#!/usr/bin/python3
"""Plot one run's metrics (runtime.metrics JSON lines) as a PNG: loss and validation loss, tokens/s,
MFU and memory, against the step (top row) and the wall-clock time (bottom row). Restarts of a
requeued run ({"event": "resume"} records) are drawn as vertical lines; when a resumed run repeats
steps, the later records win.

    jobs/plot_run.py METRICS.jsonl [-o run.png] [--title TEXT]

Needs python3-matplotlib (Debian; `make test` installs it). Run it with /usr/bin/python3.
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    steps, resumes = {}, []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"plot_run: {path}:{n}: not JSON ({e})")
            if r.get("event") == "resume":
                resumes.append(r)
            elif "step" in r and "loss" in r:
                steps[r["step"]] = r
    if not steps:
        sys.exit(f"plot_run: {path}: no step records")
    return [steps[s] for s in sorted(steps)], resumes


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("metrics")
    ap.add_argument("-o", "--output", default=None, help="PNG path (default: METRICS with .png)")
    ap.add_argument("--title", default=None)
    a = ap.parse_args()
    rows, resumes = read(a.metrics)
    out = a.output or a.metrics.rsplit(".", 1)[0] + ".png"
    has_time = all("time" in r for r in rows)
    t0 = min(r["time"] for r in rows) if has_time else 0
    panels = [("loss", "loss"), ("tokens_per_s", "tokens/s"), ("mfu", "MFU (%)"), ("memory_gib", "peak memory (GiB)")]
    nrows = 2 if has_time else 1
    fig, axes = plt.subplots(nrows, len(panels), figsize=(4.2 * len(panels), 3.4 * nrows), squeeze=False)
    for row, (xkey, xlabel) in enumerate([("step", "step"), ("time", "wall time (s)")][:nrows]):
        xs = [r[xkey] - (t0 if xkey == "time" else 0) for r in rows]
        for col, (key, label) in enumerate(panels):
            ax = axes[row][col]
            scale = 100.0 if key == "mfu" else 1.0
            ax.plot(xs, [r.get(key, float("nan")) * scale for r in rows], lw=1, label=key.replace("_", " "))
            if key == "loss":
                val = [(x, r["val_loss"]) for x, r in zip(xs, rows) if "val_loss" in r]
                if val:
                    ax.plot(*zip(*val), "o-", ms=3, lw=1, label="validation loss")
                ax.legend(fontsize=8)
            for r in resumes:
                x = r["step"] if xkey == "step" else r.get("time", t0) - t0
                ax.axvline(x, color="grey", ls=":", lw=1)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
    run_ids = sorted({str(r.get("run", "")) for r in rows} - {""})
    title = a.title or f"{a.metrics}" + (f" (run {', '.join(run_ids)}; {len(resumes)} resume(s))" if run_ids else "")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    print(f"plot_run: {len(rows)} steps -> {out}")


if __name__ == "__main__":
    main()
