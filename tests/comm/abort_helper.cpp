// Helper of test_abort: run under `mpiexec -n 4`; rank 2 throws trident::Error inside run_or_abort
// while the other ranks wait in a collective that rank 2 never joins. The job must end at once,
// non-zero, with the error printed once. The mode (argv[1]) picks where the others wait:
//   barrier          MPI_Barrier(MPI_COMM_WORLD)
//   allreduce-block  Group::all_reduce with MpiWait::Block
//   allreduce-poll   Group::all_reduce with MpiWait::Poll (MPI_Test + nanosleep)
//   mesh-poll        a ParallelMesh (tp 2 x dp 2) built by all ranks, then an all_reduce in the DP group
// The thrown message deliberately does not name the rank: the "rank 2" in the output must come from
// the job-ending machinery (abort_job).
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/group.hpp"
#include "comm/mesh.hpp"
#include "core/error.hpp"
#include "core/fatal.hpp"
#include "core/log.hpp"
#include "core/mpi_start.hpp"

namespace {

int body(const std::string& mode) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 4) throw trident::Error("abort_helper needs 4 ranks");
  std::vector<float> x(1024, 1.0f);
  std::unique_ptr<trident::ParallelMesh> mesh;
  if (mode == "mesh-poll") {
    trident::MeshConfig cfg;
    cfg.tp = 2;
    cfg.dp = 2;
    mesh = std::make_unique<trident::ParallelMesh>(MPI_COMM_WORLD, cfg, trident::MpiWait::Poll);
  }
  if (rank == 2) {
    // Let the others reach their collective first.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    throw trident::Error("injected failure for the abort test");
  }
  if (mode == "barrier") {
    MPI_Barrier(MPI_COMM_WORLD);
  } else if (mode == "allreduce-block" || mode == "allreduce-poll") {
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    trident::Group world("world", comm, {0, 1, 2, 3},
                         mode == "allreduce-block" ? trident::MpiWait::Block : trident::MpiWait::Poll);
    world.all_reduce(x.data(), static_cast<int64_t>(x.size()));
  } else if (mode == "mesh-poll") {
    mesh->dp().all_reduce(x.data(), static_cast<int64_t>(x.size()));  // rank 0's DP group holds rank 2
    mesh->world().barrier();
  } else {
    throw trident::Error("abort_helper: unknown mode '" + mode + "'");
  }
  // Reaching this line means a collective completed without rank 2.
  std::printf("rank %d: collective completed without rank 2\n", rank);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  trident::start_mpi(&argc, &argv, TRIDENT_BUILD_MPI_THREADS);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  trident::log::init(rank, size);
  trident::install_fatal_handlers();
  const std::string mode = argc > 1 ? argv[1] : "barrier";
  const int rc = trident::run_or_abort([&] { return body(mode); });
  MPI_Finalize();
  return rc;
}
