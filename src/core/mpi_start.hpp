#pragma once
// MPI_Init for trident's programs (the command line, test and benchmark mains). A gpu-sim build asks
// for MPI_THREAD_MULTIPLE: its stand-in for NCCL runs each communicator's MPI operations on the
// stream's worker thread (gpusim/README.md), as NCCL's own threads drive the network.
#include <mpi.h>

#include <cstdio>

namespace trident {

inline void start_mpi(int* argc, char*** argv) {
#if TRIDENT_GPU_SIM
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  if (provided < MPI_THREAD_MULTIPLE) {
    std::fprintf(stderr, "gpu-sim needs an MPI library with MPI_THREAD_MULTIPLE (this one provides level %d)\n",
                 provided);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
#else
  MPI_Init(argc, argv);
#endif
}

}  // namespace trident
