// Communication benchmarks of trident::Group on host buffers (MPI), run under mpiexec on every rank:
//   BM_AllReduce/<bytes>  float sum all-reduce over the world group; bytes_per_second = payload / time
//   BM_PingPong/<bytes>   isend/irecv round trip between ranks 2i and 2i+1 (all pairs at once);
//                         bytes_per_second = 2 * payload / round-trip time (one direction's bandwidth)
// Message sizes go from 4 KiB to --max_bytes (default 64 MiB) in steps of 4x.
//
// Own flags (removed before Google Benchmark sees the command line):
//   --mpi_wait=block|poll   how Group waits (runtime.mpi_wait); default $TRIDENT_MPI_WAIT or block
//   --max_bytes=N[K|M]      largest message
//
// Every rank runs every benchmark and must make the same iteration-count decisions, so each
// iteration's time is the slowest rank's (a max all-reduce outside the timed region), reported as
// manual time. Only rank 0 reports (common/mpi_benchmark.hpp).
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/group.hpp"
#include "common/mpi_benchmark.hpp"
#include "core/blas_runtime.hpp"
#include "core/mpi_start.hpp"
#include "train/stop_signals.hpp"

namespace {

using trident::Group;
using trident::MpiWait;
using trident::ReduceOp;
using trident::Request;

std::unique_ptr<Group> g_world;  // the group under test
std::unique_ptr<Group> g_sync;   // agrees on iteration times (same wait mode)

double slowest(double seconds) {
  g_sync->all_reduce_host(&seconds, 1, ReduceOp::Max);
  return seconds;
}

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void BM_AllReduce(benchmark::State& state) {
  const int64_t bytes = state.range(0), n = bytes / int64_t(sizeof(float));
  std::vector<float> buf(n, 0.0f);
  g_world->all_reduce(buf.data(), n);  // warm-up: connections, buffers
  g_sync->barrier();
  for (auto _ : state) {
    const auto t0 = Clock::now();
    g_world->all_reduce(buf.data(), n);
    state.SetIterationTime(slowest(since(t0)));
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["ranks"] = g_world->size();
}

void BM_PingPong(benchmark::State& state) {
  const int64_t bytes = state.range(0), n = bytes / int64_t(sizeof(float));
  const int me = g_world->rank();
  const int partner = me ^ 1;
  const bool active = partner < g_world->size();  // the last rank of an odd world sits out
  const bool ping = me % 2 == 0;
  std::vector<float> out(n, 1.0f), in(n, 0.0f);
  auto round_trip = [&] {
    if (!active) return;
    if (ping) {
      Request s = g_world->isend(out.data(), n, partner, 1);
      Request r = g_world->irecv(in.data(), n, partner, 2);
      g_world->wait(s);
      g_world->wait(r);
    } else {
      Request r = g_world->irecv(in.data(), n, partner, 1);
      g_world->wait(r);
      Request s = g_world->isend(in.data(), n, partner, 2);
      g_world->wait(s);
    }
  };
  round_trip();  // warm-up
  g_sync->barrier();
  for (auto _ : state) {
    const auto t0 = Clock::now();
    round_trip();
    state.SetIterationTime(slowest(since(t0)));
  }
  state.SetBytesProcessed(state.iterations() * 2 * bytes);
  state.counters["ranks"] = g_world->size();
}

int64_t parse_bytes(const std::string& s) {
  char* end = nullptr;
  int64_t v = std::strtoll(s.c_str(), &end, 10);
  if (end && (*end == 'K' || *end == 'k')) v <<= 10;
  if (end && (*end == 'M' || *end == 'm')) v <<= 20;
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  trident::tune_blas_for_this_cpu(argc, argv);  // may re-exec the process; before MPI_Init
  // A re-execution above leaves SIGUSR1, SIGTERM and SIGINT blocked; this program handles none of
  // them itself, so their default actions (and any handler a test installs) apply again.
  trident::unblock_stop_signals();
  trident::start_mpi(&argc, &argv, TRIDENT_BUILD_MPI_THREADS);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  // Own flags out; --benchmark_out only on rank 0 (one file, one writer).
  const char* env_wait = std::getenv("TRIDENT_MPI_WAIT");
  std::string wait_name = env_wait && *env_wait ? env_wait : "block";
  int64_t max_bytes = int64_t(64) << 20;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--mpi_wait=", 0) == 0) {
      wait_name = a.substr(11);
    } else if (a.rfind("--max_bytes=", 0) == 0) {
      max_bytes = parse_bytes(a.substr(12));
    } else {
      args.push_back(argv[i]);
    }
  }
  if (wait_name != "block" && wait_name != "poll") {
    if (rank == 0) std::fprintf(stderr, "bench_comm: --mpi_wait must be block or poll, not '%s'\n", wait_name.c_str());
    MPI_Finalize();
    return 2;
  }
  const MpiWait wait = wait_name == "poll" ? MpiWait::Poll : MpiWait::Block;
  std::vector<int> all(size);
  for (int r = 0; r < size; ++r) all[r] = r;
  MPI_Comm world, sync;
  MPI_Comm_dup(MPI_COMM_WORLD, &world);
  MPI_Comm_dup(MPI_COMM_WORLD, &sync);
  g_world = std::make_unique<Group>("world", world, all, wait);
  g_sync = std::make_unique<Group>("sync", sync, all, wait);

  for (int64_t b = 4 << 10; b <= max_bytes; b *= 4) {
    benchmark::RegisterBenchmark("BM_AllReduce", BM_AllReduce)->Arg(b)->UseManualTime()->Unit(benchmark::kMicrosecond);
  }
  for (int64_t b = 4 << 10; b <= max_bytes; b *= 4) {
    benchmark::RegisterBenchmark("BM_PingPong", BM_PingPong)->Arg(b)->UseManualTime()->Unit(benchmark::kMicrosecond);
  }
  benchmark::AddCustomContext("ranks", std::to_string(size));
  benchmark::AddCustomContext("mpi_wait", wait_name);

  trident::bench::run_on_every_rank(args, rank);
  g_world.reset();
  g_sync.reset();
  MPI_Finalize();
  return 0;
}
