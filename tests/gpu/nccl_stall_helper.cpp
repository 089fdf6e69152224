// A rank whose GPU stalls under an NCCL all-reduce: `nccl_stall_helper` (one rank) queues a host
// function that sleeps 120 s on the compute stream, then an all-reduce over NCCL, which waits for that
// stream, then reads the result back (which blocks). The watchdog (runtime.collective_timeout_s = 2) must
// abort the communicator and end the job with exit code 4 and a message naming the operation, the group
// and the step. Run by test_gpu_watchdog; needs a GPU (exits 77 without one).
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "backend.hpp"
#include "comm/mesh.hpp"
#include "comm/watchdog.hpp"
#include "core/fatal.hpp"
#include "core/mpi_start.hpp"
#include "cuda/cuda_kernels.hpp"
#include "cuda/device.hpp"

namespace {
void CUDART_CB stall(void*) { std::this_thread::sleep_for(std::chrono::seconds(120)); }
}  // namespace

int main(int argc, char** argv) {
  using namespace trident;
  trident::start_mpi(&argc, &argv, TRIDENT_BUILD_MPI_THREADS);
  if (cuda::device_count() == 0) {
    std::fprintf(stderr, "no CUDA device\n");
    MPI_Finalize();
    return 77;
  }
  return run_or_abort([] {
    const watchdog::Monitor monitor(/*collective_timeout_s=*/2.0, /*checkpoint_timeout_s=*/0);
    watchdog::set_step(3);
    MeshConfig m;
    ParallelMesh mesh(MPI_COMM_WORLD, m, MpiWait::Block);
    auto backend = start_backend(Backend::Cuda);
    Kernels& k = backend->kernels();
    mesh.connect_tensors(Comm::Nccl, k);
    float* x = k.alloc(1024);
    cudaLaunchHostFunc(static_cast<cudaStream_t>(cuda::native_stream(k)), stall, nullptr);
    mesh.tp().all_reduce(x, 1024);
    float host[1024];
    k.copy_to_host(host, x, 1024);  // blocks behind the stalled stream
    std::fprintf(stderr, "the stalled all-reduce completed\n");
    return 0;
  });
}
