// GPU tensor communication (issue #13), run under mpiexec on the GPU machine (benchmarks/gpu/run_comm.sh):
//   BM_AllReduce/<bytes>, BM_AllGather/<bytes>, BM_ReduceScatter/<bytes>
//       float collectives on device buffers through the group's transport (--comm=nccl or mpi; mpi is
//       host-staged); each iteration ends with the compute queue's fence, so the time is the
//       operation as the next kernel sees it. At one rank over NCCL: the latency floor of a launch.
//   BM_MemcpyRoundTrip/<bytes>
//       device -> page-locked host -> device with cudaMemcpy on one rank: the floor of the staging.
// bytes_per_second = payload / time. Every rank runs every benchmark; an iteration's time is the
// slowest rank's (a host all-reduce outside the timed region). Only rank 0 reports (common/mpi_benchmark.hpp).
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "backend.hpp"
#include "comm/mesh.hpp"
#include "common/mpi_benchmark.hpp"
#include "core/mpi_start.hpp"

namespace {

using namespace trident;
using Clock = std::chrono::steady_clock;

std::unique_ptr<ParallelMesh> g_mesh;
std::unique_ptr<ComputeBackend> g_backend;

Kernels& k() { return g_backend->kernels(); }
Group& group() { return g_mesh->tp(); }

double slowest(double seconds) {
  g_mesh->world().all_reduce_host(&seconds, 1, ReduceOp::Max);
  return seconds;
}
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

template <class Op> void timed(benchmark::State& state, int64_t bytes, Op op) {
  op();  // warm-up: NCCL connections, staging buffers
  k().fence();
  group().barrier();
  for (auto _ : state) {
    const auto t0 = Clock::now();
    op();
    k().fence();
    state.SetIterationTime(slowest(since(t0)));
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["ranks"] = group().size();
}

void BM_AllReduce(benchmark::State& state) {
  const int64_t n = state.range(0) / 4;
  float* x = k().alloc(n);
  timed(state, state.range(0), [&] { group().all_reduce(x, n); });
  k().free(x);
}

void BM_AllGather(benchmark::State& state) {
  const int64_t n = state.range(0) / 4, p = group().size(), block = n / p;
  float* in = k().alloc(block);
  float* out = k().alloc(block * p);
  timed(state, state.range(0), [&] { group().all_gather(in, out, block); });
  k().free(in);
  k().free(out);
}

void BM_ReduceScatter(benchmark::State& state) {
  const int64_t n = state.range(0) / 4, p = group().size(), block = n / p;
  float* in = k().alloc(block * p);
  float* out = k().alloc(block);
  timed(state, state.range(0), [&] { group().reduce_scatter(in, out, block); });
  k().free(in);
  k().free(out);
}

void BM_MemcpyRoundTrip(benchmark::State& state) {
  const int64_t bytes = state.range(0);
  float* d = k().alloc(bytes / 4);
  void* h = nullptr;
  cudaMallocHost(&h, size_t(bytes));
  timed(state, bytes, [&] {
    cudaMemcpy(h, d, size_t(bytes), cudaMemcpyDeviceToHost);
    cudaMemcpy(d, h, size_t(bytes), cudaMemcpyHostToDevice);
  });
  cudaFreeHost(h);
  k().free(d);
}

}  // namespace

int main(int argc, char** argv) {
  trident::start_mpi(&argc, &argv, TRIDENT_BUILD_MPI_THREADS);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string comm = "nccl";
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--comm=", 0) == 0)
      comm = a.substr(7);
    else
      args.push_back(argv[i]);
  }
  if (comm != "nccl" && comm != "mpi") {
    if (rank == 0) std::fprintf(stderr, "bench_gpu_comm: --comm must be nccl or mpi, not '%s'\n", comm.c_str());
    MPI_Finalize();
    return 2;
  }
  if (!cuda_device_available()) {
    if (rank == 0) std::fprintf(stderr, "bench_gpu_comm: no CUDA device\n");
    MPI_Finalize();
    return 2;
  }
  MeshConfig m;
  MPI_Comm_size(MPI_COMM_WORLD, &m.tp);
  g_mesh = std::make_unique<ParallelMesh>(MPI_COMM_WORLD, m, MpiWait::Block);
  const Comm transport = comm == "nccl" ? Comm::Nccl : Comm::Mpi;
  g_backend = start_backend(Backend::Cuda, g_mesh->node().local_rank, g_mesh->node().local_size, transport == Comm::Mpi);
  g_mesh->connect_tensors(transport, k());

  for (auto [name, fn] : {std::pair{"BM_AllReduce", BM_AllReduce}, std::pair{"BM_AllGather", BM_AllGather},
                          std::pair{"BM_ReduceScatter", BM_ReduceScatter}})
    for (int64_t b = 4 << 10; b <= int64_t(256) << 20; b *= 4)
      benchmark::RegisterBenchmark(name, fn)->Arg(b)->UseManualTime()->Unit(benchmark::kMicrosecond);
  if (m.tp == 1)
    for (int64_t b = 4 << 10; b <= int64_t(256) << 20; b *= 4)
      benchmark::RegisterBenchmark("BM_MemcpyRoundTrip", BM_MemcpyRoundTrip)
          ->Arg(b)->UseManualTime()->Unit(benchmark::kMicrosecond);
  benchmark::AddCustomContext("comm", comm);
  benchmark::AddCustomContext("ranks", std::to_string(m.tp));

  trident::bench::run_on_every_rank(args, rank);
  g_mesh.reset();
  g_backend.reset();
  MPI_Finalize();
  return 0;
}
