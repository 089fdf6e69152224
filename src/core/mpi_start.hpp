#pragma once
// MPI_Init for trident's programs (the command line, test and benchmark mains). A gpu-sim build asks
// for MPI_THREAD_MULTIPLE: its stand-in for NCCL runs each communicator's MPI operations on the
// stream's worker thread (gpusim/README.md), as NCCL's own threads drive the network.
#include <mpi.h>

#include <cstdio>

namespace trident {

enum class MpiThreads { Default, Multiple };

// The level comes in as an argument rather than from TRIDENT_GPU_SIM here, so that trident_lib is the
// same code in the release and the gpu-sim builds (compiled once: CI's compiler cache, CMakeLists.txt).
// A program's main passes TRIDENT_BUILD_MPI_THREADS, its own build's level.
inline void start_mpi(int* argc, char*** argv, MpiThreads threads) {
  if (threads == MpiThreads::Default) {
    MPI_Init(argc, argv);
    return;
  }
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    std::fprintf(stderr, "gpu-sim needs an MPI library with MPI_THREAD_MULTIPLE (this one provides level %d)\n",
                 provided);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
}

}  // namespace trident

#if TRIDENT_GPU_SIM
#define TRIDENT_BUILD_MPI_THREADS ::trident::MpiThreads::Multiple
#else
#define TRIDENT_BUILD_MPI_THREADS ::trident::MpiThreads::Default
#endif
