#!/usr/bin/env python3
"""One table of trident, llm.c and PyTorch GPT-2 training steps on one GPU, from the logs that
benchmarks/gpu/compare_bf16.sh leaves in its LOG_DIR.

  python3 compare_table.py LOG_DIR [--device NAME] [--out FILE]

Reads, for each shape S in 124M and 774M (absent files become "not run" rows, failed runs name their log):
  trident-S.jsonl  trident's metrics (runtime.metrics): step_ms of each step; steps 1-2 are warm-up
  llmc-S.log       llm.c train_gpt2cu's output: "step    3/32 | loss ... | 34.62 ms | ..."; steps 1-2 warm-up
  pytorch-S.log    benchmarks/gpu/pytorch_gpu_step.py's RESULT line (its own warm-up left out)
  phases.tsv       phase, exit status, seconds (compare_bf16.sh): why a run has no figures
  device.txt       nvidia-smi's name on the first line (or --device)
ms/step is the median over the timed steps; tokens/s = B*T / that; MFU = (6N + 6LTd) * tokens/s / peak,
llm.c's formula for every system (N: all parameters with the tied embedding once and the vocabulary
padded to 50304; 6LTd: causal attention), peak: the device's dense bf16 figure from NVIDIA's data
sheet, by its name (PEAKS, the table of src/train/gpu_peaks.cpp). Standard library only.
"""
import argparse
import json
import os
import re
import statistics
import sys

# Dense bf16 TFLOP/s by the CUDA device name (nvidia-smi's name); the same entries as
# src/train/gpu_peaks.cpp, whose comments name the data sheets (tests/benchmarks checks they agree).
PEAKS = {
    "NVIDIA A100-SXM4-40GB": 312,
    "NVIDIA A100-SXM4-80GB": 312,
    "NVIDIA A100-PCIE-40GB": 312,
    "NVIDIA A100 80GB PCIe": 312,
    "NVIDIA H100 80GB HBM3": 989,
    "NVIDIA H100 PCIe": 756,
    "NVIDIA H100 NVL": 835,
    "NVIDIA H200": 989,
    "NVIDIA H200 NVL": 835,
    "NVIDIA GH200 480GB": 989,
}

VOCAB_PADDED = 50304
SEQ = 1024
# name: (layers, hidden, heads, batch)
SHAPES = {"124M": (12, 768, 12, 16), "774M": (36, 1280, 20, 8)}
WARMUP_STEPS = 2  # trident and llm.c: steps 1..2 are left out

SYSTEMS = [
    # system, the file with its step times, its log, the table's label
    ("trident", "trident-{}.jsonl", "trident-{}.log",
     "trident, CUDA, train.precision bf16 (bf16 working copy, operands and stored activations, fp32 masters)"),
    ("llmc", "llmc-{}.log", "llmc-{}.log", "llm.c train_gpt2cu, bf16, its own attention (no cuDNN)"),
    ("pytorch", "pytorch-{}.log", "pytorch-{}.log", "PyTorch, torch.compile, flash SDPA, fused AdamW, bf16 autocast"),
]


def gpt2_parameters(layers, hidden, vocab=VOCAB_PADDED, seq=SEQ):
    """Every parameter of GPT-2 with a tied embedding: wte, wpe, per layer 12C^2 + 13C, the final LayerNorm."""
    C = hidden
    return vocab * C + seq * C + layers * (12 * C * C + 13 * C) + 2 * C


def flops_per_token(layers, hidden, seq=SEQ):
    """llm.c's 6N + 6LTd."""
    return 6 * gpt2_parameters(layers, hidden) + 6 * layers * seq * hidden


def peak_tflops(device):
    return PEAKS.get(device.strip())


def median_or_none(values):
    return statistics.median(values) if values else None


def trident_step_ms(text):
    ms = []
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if "event" in r or "step_ms" not in r:
            continue
        if r["step"] > WARMUP_STEPS:
            ms.append(float(r["step_ms"]))
    return ms


LLMC_STEP = re.compile(r"^step\s+(\d+)/(\d+) \| loss .*\| ([0-9.]+) ms \|")


def llmc_step_ms(text):
    ms = []
    for line in text.splitlines():
        m = LLMC_STEP.match(line)
        if m and int(m.group(1)) > WARMUP_STEPS:
            ms.append(float(m.group(3)))
    return ms


def pytorch_step_ms(text):
    for line in text.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[len("RESULT "):])
            return [float(x) for x in r.get("step_ms", [r["ms_per_step"]])]
    return []


PARSERS = {"trident": trident_step_ms, "llmc": llmc_step_ms, "pytorch": pytorch_step_ms}


def read_phases(log_dir):
    phases = {}
    path = os.path.join(log_dir, "phases.tsv")
    if os.path.exists(path):
        with open(path) as lines:
            for line in lines:
                f = line.rstrip("\n").split("\t")
                if len(f) >= 3:
                    phases[f[0]] = (f[1], f[2])
    return phases


def rows(log_dir, device):
    peak = peak_tflops(device)
    phases = read_phases(log_dir)
    out = []
    for shape, (L, C, NH, B) in SHAPES.items():
        for system, pattern, log, label in SYSTEMS:
            path = os.path.join(log_dir, pattern.format(shape))
            ms = []
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    ms = PARSERS[system](f.read())
            phase = phases.get(f"{system}-{shape}")
            row = {"system": system, "label": label, "shape": shape, "layers": L, "hidden": C, "heads": NH,
                   "batch": B, "seq": SEQ, "log": log.format(shape), "timed_steps": len(ms)}
            med = median_or_none(ms)
            if med:
                tok = B * SEQ / (med / 1e3)
                row.update(ms_per_step=med, tokens_per_s=tok,
                           mfu=flops_per_token(L, C) * tok / (peak * 1e12) if peak else None)
            if phase:
                row["rc"], row["seconds"] = phase
            out.append(row)
    return out


def markdown(rows_, device, commit=""):
    peak = peak_tflops(device)
    lines = [f"Device: {device or 'unknown'}; MFU against "
             + (f"{peak} TFLOP/s (dense bf16, NVIDIA's data sheet)" if peak
                else "no peak: the device is not in the data-sheet table") + (f"; {commit}" if commit else ""),
             "", "| system | shape | B | ms/step | tokens/s | MFU | notes |", "|---|---|---|---|---|---|---|"]
    for r in rows_:
        shape = f"{r['shape']} ({r['layers']}L, {r['hidden']}, {r['heads']}h), T {r['seq']}"
        if "ms_per_step" in r:
            mfu = f"{100 * r['mfu']:.1f} %" if r["mfu"] is not None else "n/a"
            note = f"median of {r['timed_steps']} steps"
            if r.get("rc") not in (None, "0"):
                note += f"; exit status {r['rc']}"
            lines.append(f"| {r['label']} | {shape} | {r['batch']} | {r['ms_per_step']:.1f} | "
                         f"{r['tokens_per_s']:,.0f} | {mfu} | {note} |")
        else:
            why = "not run"
            if r.get("rc") is not None:
                why = {"124": "timed out", "137": "killed (time or memory)"}.get(r["rc"], f"failed, exit status {r['rc']}")
                why += f" after {r['seconds']} s; see {r['log']}"
            lines.append(f"| {r['label']} | {shape} | {r['batch']} | - | - | - | {why} |")
    lines += ["", "MFU = (6N + 6LTd) x tokens/s / peak for every system (llm.c's formula; N with the tied "
              "embedding once and the vocabulary padded to 50304: 124,475,904 and 774,090,240). trident "
              "computes with a bf16 working copy of fp32 master weights and keeps fp32 gradients under "
              "train.precision = \"bf16\" (train.bf16_parameters, the default). llm.c is built without "
              "cuDNN; with cuDNN attention the GPU notes measured 34.6 ms (124M, B 16) and 99.3 ms (774M, B 8) on an H100 SXM."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log_dir")
    ap.add_argument("--device", help="the GPU's name (default: the first line of LOG_DIR/device.txt)")
    ap.add_argument("--commit", default="")
    ap.add_argument("--out", help="markdown file (default LOG_DIR/compare_bf16.md); JSON beside it")
    a = ap.parse_args(argv)
    device = a.device
    if device is None:
        path = os.path.join(a.log_dir, "device.txt")
        device = ""
        if os.path.exists(path):
            with open(path) as f:
                device = f.readline().split(",")[0].strip()
    rs = rows(a.log_dir, device)
    text = markdown(rs, device, a.commit)
    out = a.out or os.path.join(a.log_dir, "compare_bf16.md")
    with open(out, "w") as f:
        f.write(text)
    with open(os.path.splitext(out)[0] + ".json", "w") as f:
        json.dump({"device": device, "peak_tflops": peak_tflops(device), "rows": rs}, f, indent=1)
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
