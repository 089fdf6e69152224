#!/usr/bin/python3
"""Reads a trident checkpoint with h5py alone (no trident code) and checks what docs/checkpoints.md
promises: the groups, every tensor under its Hugging Face GPT-2 name with its global unpadded
shape in /model, /optim/exp_avg and /optim/exp_avg_sq, float32, the root attributes, and every
dataset's `checksum` attribute recomputed with numpy.

usage: h5py_check.py CHECKPOINT EXPECTED_JSON   (EXPECTED_JSON: {hf name: shape})
Prints "OK <n> datasets" and exits 0, or names what is wrong and exits 1.
"""
import json
import sys

import h5py
import numpy as np

K = np.uint64(0x9E3779B97F4A7C15)
M1 = np.uint64(0xBF58476D1CE4E5B9)
M2 = np.uint64(0x94D049BB133111EB)


def mix(z):
    z = z + K
    z = (z ^ (z >> np.uint64(30))) * M1
    z = (z ^ (z >> np.uint64(27))) * M2
    return z ^ (z >> np.uint64(31))


def checksum(array):
    bits = np.ascontiguousarray(array, dtype="<f4").reshape(-1).view(np.uint32).astype(np.uint64)
    idx = np.arange(bits.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return int(mix((idx * K) ^ bits).sum(dtype=np.uint64))


def text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def main():
    path, expected_path = sys.argv[1], sys.argv[2]
    expected = json.load(open(expected_path))
    errors = []
    n = 0
    with h5py.File(path, "r") as f:
        if text(f.attrs["format"]) != "trident-checkpoint":
            errors.append("root attribute format")
        if int(f.attrs["format_version"]) != 1:
            errors.append("root attribute format_version")
        for group in ("train", "rng", "lr_schedule", "data", "layout", "model", "optim", "optim/exp_avg",
                      "optim/exp_avg_sq"):
            if group not in f:
                errors.append("missing group /" + group)
        for key in ("step", "format_version"):
            if key not in f.attrs:
                errors.append("missing root attribute " + key)
        for key in ("tp", "pp", "dp", "zero", "virtual_stages", "world_size"):
            if key not in f["layout"].attrs:
                errors.append("missing /layout attribute " + key)
        if int(f["data"].attrs["next_step"]) != int(f.attrs["step"]):
            errors.append("/data next_step")
        deck = f["deck"][()]
        if b"[model]" not in deck:
            errors.append("/deck holds no deck")
        for group in ("model", "optim/exp_avg", "optim/exp_avg_sq"):
            names = set(f[group].keys())
            if names != set(expected):
                errors.append("/%s holds %s, expected %s" % (group, sorted(names), sorted(expected)))
            for name, shape in expected.items():
                d = f[group].get(name)
                if d is None:
                    errors.append("missing /%s/%s" % (group, name))
                    continue
                if list(d.shape) != shape:
                    errors.append("/%s/%s shape %s, expected %s" % (group, name, list(d.shape), shape))
                if d.dtype != np.dtype("<f4"):
                    errors.append("/%s/%s dtype %s" % (group, name, d.dtype))
                if checksum(d[()]) != int(d.attrs["checksum"]):
                    errors.append("/%s/%s checksum" % (group, name))
                n += 1
    if errors:
        print("\n".join(errors))
        return 1
    print("OK %d datasets" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
