#!/usr/bin/python3
"""Checks a bf16 export against the fp32 export of the same checkpoint with numpy alone (no trident
code): both files' headers name the same tensors and shapes; every tensor of the bf16 file is BF16 and
holds each fp32 value rounded to bfloat16 (8 significant bits, to nearest with ties to even, computed
here with frexp and numpy's round-half-to-even; the value past bf16's largest becomes inf).

usage: bf16_export_check.py FP32.safetensors BF16.safetensors
Prints "OK <n> tensors, <m> values" and exits 0, or names what is wrong and exits 1.
"""
import json
import struct
import sys

import numpy as np


def read_with_prefix(path):
    """The tensors' header entries, their data, and the file's bytes before the data (size and header)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    return header, blob[8 + n:], blob[:8 + n]


def read(path):
    header, data, _ = read_with_prefix(path)
    return header, data


def bf16_by_arithmetic(x):
    x = x.astype(np.float64)
    m, e = np.frexp(x)
    step = np.maximum(e - 8, -133)  # bf16's subnormals keep fp32's exponent floor: a fixed step of 2^-133
    r = np.round(np.ldexp(x, -step)) * np.exp2(step.astype(np.float64))
    r[np.abs(r) > np.finfo(np.float32).max] = np.inf * np.sign(r[np.abs(r) > np.finfo(np.float32).max])
    return r.astype(np.float32)


def main(fp32_path, bf16_path):
    h32, d32 = read(fp32_path)
    h16, d16 = read(bf16_path)
    if sorted(h32) != sorted(h16):
        return f"the tensor names differ: {sorted(set(h32) ^ set(h16))}"
    values = 0
    for name, e32 in h32.items():
        e16 = h16[name]
        if e16["dtype"] != "BF16" or e32["dtype"] != "F32":
            return f"{name}: dtypes {e32['dtype']} and {e16['dtype']}, expected F32 and BF16"
        if e16["shape"] != e32["shape"]:
            return f"{name}: shapes {e32['shape']} and {e16['shape']}"
        a, b = e32["data_offsets"]
        x = np.frombuffer(d32[a:b], dtype="<f4")
        a, b = e16["data_offsets"]
        bits = np.frombuffer(d16[a:b], dtype="<u2").astype(np.uint32) << 16
        got = bits.view(np.float32)
        want = bf16_by_arithmetic(x)
        if got.shape != want.shape or not np.array_equal(got, want):
            bad = int(np.flatnonzero(got != want)[0])
            return f"{name}[{bad}]: {x[bad]!r} stored as {got[bad]!r}, bf16 rounding gives {want[bad]!r}"
        values += x.size
    print(f"OK {len(h32)} tensors, {values} values")
    return None


if __name__ == "__main__":
    problem = main(sys.argv[1], sys.argv[2])
    if problem:
        print(problem)
        sys.exit(1)
