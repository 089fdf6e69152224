#!/usr/bin/env bash
# The sanitizer stage of CI (`make build-asan`, `make test-asan`): builds trident and the unit and MPI
# test programs with AddressSanitizer + UndefinedBehaviorSanitizer (-Og, every finding fatal) and runs
# their 1- and 2-rank entries, plus the 4-rank data-parallel one (pp x dp and tp x dp with ZeRO), and
# the kernel tests on gpu-sim: gpu-sim's block runner (fibers, barriers, warp operations, in both thread
# orders) and the CUDA backend's kernels (each kernel against its
# definition; there the CUDA allocator hands out exact-size blocks), so that a kernel reading past a
# buffer's end is reported at its line. test_cross_backend runs the same kernels again through the
# Kokkos comparison and stays in the release and gpu-sim stages. The
# 8-rank entries, the 4-rank pipeline one (a middle stage of pp 4 receives and sends as the two stages
# of pp 2 do), the PyTorch reference and the fault sweeps run only in the release stage: under the
# sanitizers they would lengthen CI without reaching code that the entries below do not reach.
#   scripts/sanitizer-tests.sh BUILD_DIR build|test|all
# Packages are installed by the make targets (scripts/install-deps.sh), not here.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: sanitizer-tests.sh BUILD_DIR build|test|all}
what=${2:?usage: sanitizer-tests.sh BUILD_DIR build|test|all}
jobs=${JOBS:-$(nproc)}

programs=(test_core test_deck test_data test_zero_partition test_checkpoint test_comm_layout test_comm_mesh
          test_kernels test_planner test_training_invariants test_fault_deck_defects test_fault_deck_fuzz
          test_tensor_parallel test_pipeline_parallel test_data_parallel test_gradient_finishing
          test_train_reports checkpoint_io_errors test_staged_transport test_pipeline_on_nccl
          test_kernels_cuda test_gpusim_kernels test_text test_data_prepare)
entries="^(test_(core|deck|zero_partition|comm_layout|kernels|planner|training_invariants|train_reports|pipeline_on_nccl|text|data_prepare)_np1"
entries+="|test_(data|checkpoint|comm_mesh|tensor_parallel|gradient_finishing|staged_transport)_np[12]"
entries+="|test_pipeline_parallel_np[12]|test_data_parallel_np[124]|test_fault_deck_(defects|fuzz)_np1|checkpoint_io_errors_np[12]"
entries+="|test_(kernels_cuda|gpusim_kernels|gpusim_kernels_reverse)_np1)$"

if [[ $what == build || $what == all ]]; then
  # -g1: line tables only (file:line in the sanitizers' stack traces), a faster build than full -g.
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DTRIDENT_SANITIZE=ON \
    -DTRIDENT_GPU_SIM=ON -DTRIDENT_BUILD_BENCHMARKS=OFF ${CMAKE_ARGS_ASAN:-}
  cmake --build "$build" -j"$jobs" --target trident "${programs[@]}"
fi
if [[ $what == test || $what == all ]]; then
  # detect_leaks=0: MPICH and HDF5 keep allocations until exit by design; leaks are not what this
  # stage looks for. The fuzz tests run fewer cases here (the release stage runs them all); 150 deck
  # mutations keep enough accepted decks (about 3%) above the suite's 2% floor.
  cd "$build"
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 TRIDENT_FUZZ_CASES=150 \
    ctest --output-on-failure -j"$jobs" -R "$entries"
fi
