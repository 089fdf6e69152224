#!/usr/bin/python3
"""The values a bf16 working copy computes with, from the fp32 export of a checkpoint, with numpy alone
(no trident code): every tensor rounded to bfloat16 (bf16_export_check.py's arithmetic) but what the
model reads in fp32, the 1-D tensors (biases, norm weights and biases) and the position embedding. Written as an F32 file with
the same header, so that a run with fp32 parameters computes with exactly those values.

usage: working_copy_values.py FP32.safetensors OUT.safetensors
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bf16_export_check import bf16_by_arithmetic, read_with_prefix  # noqa: E402

POSITION_EMBEDDINGS = ("transformer.wpe.weight", "model.embed_positions.weight")


def main(fp32_path, out_path):
    header, data, prefix = read_with_prefix(fp32_path)
    out = bytearray(data)
    rounded = 0
    for name, e in header.items():
        if e["dtype"] != "F32":
            return f"{name}: dtype {e['dtype']}, expected F32"
        if len(e["shape"]) < 2 or name in POSITION_EMBEDDINGS:
            continue
        a, b = e["data_offsets"]
        out[a:b] = bf16_by_arithmetic(np.frombuffer(data[a:b], dtype="<f4")).astype("<f4").tobytes()
        rounded += 1
    with open(out_path, "wb") as f:
        f.write(prefix + bytes(out))
    print(f"OK {rounded} of {len(header)} tensors rounded")
    return None


if __name__ == "__main__":
    problem = main(sys.argv[1], sys.argv[2])
    if problem:
        print(problem)
        sys.exit(1)
