#!/usr/bin/env python3
"""Independent safetensors reader/writer for the tests: only json + numpy, no safetensors package.

  safetensors_np.py dump FILE    prints {"header_len", "metadata", "tensors": {name: {dtype, shape,
                                 data_offsets, values}}} as JSON; checks the layout the Python library
                                 writes (header padded to 8 bytes, tensors packed in name order)
                                 and exits non-zero when it differs.
  safetensors_np.py write FILE   writes a file with F32, F16, BF16 and F64 tensors of known values
                                 (stored in reverse name order, header unpadded) and metadata.
"""
import json
import struct
import sys

import numpy as np

DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I32": "<i4", "I64": "<i8", "U8": "u1"}


def decode(dtype, raw, shape):
    if dtype == "BF16":
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        arr = bits.view(np.float32)
    else:
        arr = np.frombuffer(raw, dtype=DTYPES[dtype])
    return arr.reshape(shape)


def dump(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n].decode("utf-8"))
    data = blob[8 + n :]
    out = {"header_len": n, "metadata": header.pop("__metadata__", {}), "tensors": {}}
    problems = []
    if n % 8 != 0:
        problems.append(f"header length {n} is not a multiple of 8")
    expected_begin = 0
    for name in sorted(header):
        info = header[name]
        begin, end = info["data_offsets"]
        if begin != expected_begin:
            problems.append(f"tensor {name} starts at {begin}, expected {expected_begin} (name order)")
        expected_begin = end
        arr = decode(info["dtype"], data[begin:end], info["shape"])
        out["tensors"][name] = {
            "dtype": info["dtype"],
            "shape": info["shape"],
            "data_offsets": [begin, end],
            "values": [float(x) for x in arr.reshape(-1)],
        }
    if expected_begin != len(data):
        problems.append(f"data section has {len(data)} bytes, tensors cover {expected_begin}")
    print(json.dumps(out))
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    return 0


def write(path):
    tensors = {
        "a.weight": ("F32", np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5 - 1.0),
        "b.half": ("F16", np.array([1.0, -2.5, 0.099975586, 65504.0, 6.0e-8], dtype=np.float16)),
        "c.bf16": ("BF16", np.array([1.0, -3.0, 0.15625, 1.0e30], dtype=np.float32)),
        "d.double": ("F64", np.array([[0.25], [-7.0]], dtype=np.float64)),
        "e.scalar": ("F32", np.array(7.25, dtype=np.float32)),
    }
    header = {"__metadata__": {"format": "pt", "source": "safetensors_np.py"}}
    chunks = []
    offset = 0
    for name in sorted(tensors, reverse=True):  # data in reverse name order: readers must not assume order
        dtype, arr = tensors[name]
        if dtype == "BF16":
            raw = (arr.astype("<f4").view(np.uint32) >> 16).astype("<u2").tobytes()
        else:
            raw = arr.astype(DTYPES[dtype]).tobytes()
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode("utf-8")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("dump", "write"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(dump(sys.argv[2]) if sys.argv[1] == "dump" else write(sys.argv[2]))
