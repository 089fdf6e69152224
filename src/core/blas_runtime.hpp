#pragma once
// BLAS start-up tuning. Debian's OpenBLAS (DYNAMIC_ARCH 0.3.21) does not know recent Xeons and falls
// back to its SSE3 "Prescott" kernels, 3-5x slower than the AVX-512 ones. When that fallback is
// detected on a CPU that has AVX-512 (or AVX2), the process re-executes itself once with
// OPENBLAS_CORETYPE set to the matching kernel family. A CPU that OpenBLAS recognises is left alone,
// and so is an OPENBLAS_CORETYPE the user set; TRIDENT_BLAS_TUNE=0 turns this off.
#include <string>

namespace trident {

// Call first thing in main(), before MPI_Init: it may re-exec the process with the same arguments,
// with SIGUSR1, SIGTERM and SIGINT blocked (pending signals survive the exec). The new image finds them
// still blocked: every main calls unblock_stop_signals() (train/stop_signals.hpp) once its handlers, if
// any, are installed (trident's cli_main, the test main, the benchmarks).
void tune_blas_for_this_cpu(int argc, char** argv);

// The OpenBLAS kernel family in use (e.g. "SkylakeX", "Haswell", "Prescott").
std::string blas_core_name();

}  // namespace trident
