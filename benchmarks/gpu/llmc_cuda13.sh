#!/usr/bin/env bash
# Our CUDA 13 fix for llm.c's llmc/cuda_utils.cuh (commit f1e2ace), applied to a staged copy:
#   bash benchmarks/gpu/llmc_cuda13.sh LLMC_DIR
# CUDA 13 changed cudaMemAdvise to take a cudaMemLocation, so the call in cudaMallocConditionallyManaged
# (the fallback to managed memory when cudaMalloc runs out of memory) no longer compiles. A benchmark
# should not fall back to slower memory silently anyway: the fallback becomes an error exit that names
# the allocation. Idempotent; fails if the file does not have the expected shape.
set -euo pipefail
f=${1:?usage: llmc_cuda13.sh LLMC_DIR}/llmc/cuda_utils.cuh
[ -f "$f" ] || { echo "llmc_cuda13: $f not found" >&2; exit 1; }
if grep -q 'trident: no managed-memory fallback' "$f"; then exit 0; fi
[ "$(grep -c 'cudaMallocManaged(out, bytes)' "$f")" = 1 ] && [ "$(grep -c 'cudaMemAdvise(' "$f")" = 1 ] \
  || { echo "llmc_cuda13: $f is not the expected version (one cudaMallocManaged and one cudaMemAdvise)" >&2; exit 1; }
sed -i \
  -e '/cudaMallocManaged(out, bytes)/c\        fprintf(stderr, "[CUDA ERROR] out of device memory allocating %zu bytes at %s:%d (trident: no managed-memory fallback)\\n", bytes, file, line); exit(EXIT_FAILURE);' \
  -e '/cudaMemAdvise(/d' "$f"
grep -q 'trident: no managed-memory fallback' "$f" && ! grep -q 'cudaMemAdvise(' "$f" \
  || { echo "llmc_cuda13: patching $f failed" >&2; exit 1; }
echo "llmc_cuda13: patched $f (cudaMemAdvise fallback -> error exit)"
