#!/usr/bin/env bash
# Stage llm.c's train_gpt2cu sources (karpathy/llm.c, MIT) for the GPU machine, which has no network:
# a pinned commit's files that `make train_gpt2cu` needs, exported into .device-deps/llm.c/ (git-ignored,
# sent with the checkout through `carry`), then patched for CUDA 13 by llmc_cuda13.sh (ours).
#   bash benchmarks/gpu/stage_llmc.sh [LLMC_GIT_DIR]
# LLMC_GIT_DIR: a git clone or mirror of https://github.com/karpathy/llm.c that holds the pinned commit
# (default $LLMC_MIRROR, else /work/.mirror/karpathy+llm.c/repo). Run from the checkout root, after
# benchmarks/gpu/stage_device_deps.sh (which creates .device-deps and excludes it from git). About 0.3 MB.
# CHECK_BUILD=1 also builds train_gpt2cu here with nvcc (sm_90, no cuDNN) to prove that it compiles,
# then removes the binary (benchmarks/gpu/build_llmc.sh; an empty stand-in for NVML where there is no driver).
set -euo pipefail
commit=f1e2ace651495b74ae22d45d1723443fd00ecd3a  # master of 2025-05-10 ("Merge pull request #801")
src=${1:-${LLMC_MIRROR:-/work/.mirror/karpathy+llm.c/repo}}
dest=.device-deps/llm.c
here=$(cd "$(dirname "$0")" && pwd)
[ -d .git ] || [ -f .git ] || { echo "stage_llmc: run from the checkout root" >&2; exit 2; }
git -C "$src" cat-file -e "$commit^{commit}" 2>/dev/null \
  || { echo "stage_llmc: $src does not hold llm.c commit $commit (clone or fetch github:karpathy/llm.c)" >&2; exit 1; }
mkdir -p .device-deps
grep -qx '/.device-deps/' "$(git rev-parse --git-common-dir)/info/exclude" 2>/dev/null \
  || echo '/.device-deps/' >>"$(git rev-parse --git-common-dir)/info/exclude"
rm -rf "$dest"
mkdir -p "$dest"
# train_gpt2cu needs train_gpt2.cu and llmc/ (its headers; cudnn_att.cpp only with USE_CUDNN=1), the Makefile,
# and the licence goes with the copy.
git -C "$src" archive --format=tar "$commit" LICENSE Makefile train_gpt2.cu llmc | tar -x -C "$dest"
echo "$commit" >"$dest/COMMIT"
bash "$here/llmc_cuda13.sh" "$dest"
echo "stage_llmc: llm.c $commit in $dest ($(du -sh "$dest" | cut -f1)); .device-deps is $(du -sh .device-deps | cut -f1)"
if [ "${CHECK_BUILD:-0}" = 1 ]; then
  bash "$here/build_llmc.sh" "$dest"
  rm -rf "$dest/train_gpt2cu" "$dest/build" "$dest/build.log" "$dest/nvml-link"
  echo "stage_llmc: the build check passed; binary removed"
fi
