#!/usr/bin/env bash
# Builds llm.c's train_gpt2cu in a staged copy (benchmarks/gpu/stage_llmc.sh): bf16, sm_90 (ARCH), one
# GPU, no MPI, no cuDNN (llm.c's own attention kernels).
#   bash benchmarks/gpu/build_llmc.sh LLMC_DIR        (ARCH=90 by default; llm.c's Makefile never guesses it)
# llm.c's Makefile links -lnvidia-ml; a machine with the driver but no development link (only
# libnvidia-ml.so.1) gets one in LLMC_DIR/nvml-link, pointing at the driver's library; a machine without
# the driver (this development VM, to check that it compiles) gets an empty stand-in library, which is
# enough because llm.c calls NVML only when nvml.h is present (llmc/mfu.h). Log: LLMC_DIR/build.log.
set -euo pipefail
dir=${1:?usage: build_llmc.sh LLMC_DIR}
arch=${ARCH:-90}
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || { echo "build_llmc: no nvcc" >&2; exit 1; }
link="$(cd "$dir" && pwd)/nvml-link"
rm -rf "$link"
mkdir -p "$link"
have_dev=""
for d in "$(dirname "$nvcc")/../lib64/stubs" "$(dirname "$nvcc")/../targets/x86_64-linux/lib/stubs" \
  /usr/lib/x86_64-linux-gnu /usr/lib64; do
  [ -e "$d/libnvidia-ml.so" ] && { have_dev=$d; break; }
done
if [ -z "$have_dev" ]; then
  so1=$(ldconfig -p 2>/dev/null | awk '/libnvidia-ml\.so\.1 .*x86-64/ {print $NF; exit}')
  if [ -n "$so1" ]; then
    ln -s "$so1" "$link/libnvidia-ml.so"
  else
    echo "build_llmc: no libnvidia-ml (no driver): linking an empty stand-in (train_gpt2cu will not run here)"
    printf 'void trident_nvml_stand_in(void) {}\n' | cc -shared -fPIC -x c - -o "$link/libnvidia-ml.so"
  fi
fi
rm -f "$dir/train_gpt2cu"  # a failed build must not leave an older binary behind
t0=$SECONDS
(cd "$dir" && PATH="$(dirname "$nvcc"):$PATH" make train_gpt2cu NO_MULTI_GPU=1 NO_USE_MPI=1 USE_CUDNN=0 \
  GPU_COMPUTE_CAPABILITY="$arch" NVCC_LDLIBS="-L$link" >build.log 2>&1) \
  || { tail -30 "$dir/build.log"; echo "build_llmc: make failed (log: $dir/build.log)" >&2; exit 1; }
echo "build_llmc: $dir/train_gpt2cu (sm_$arch, no cuDNN) built with $("$nvcc" --version | tail -1) in $((SECONDS - t0)) s"
