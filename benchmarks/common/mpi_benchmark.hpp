#pragma once
// Google Benchmark under mpiexec: every rank runs every benchmark (their communication must match, and
// each iteration's time is agreed by the caller), only rank 0 reports and writes --benchmark_out.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <algorithm>
#include <string>
#include <vector>

namespace trident::bench {

class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

// Runs the registered benchmarks with `args` (the command line less the program's own flags); an
// unrecognised flag ends the job. Off rank 0 --benchmark_out is dropped and nothing is printed.
inline void run_on_every_rank(std::vector<char*> args, int rank) {
  if (rank != 0)
    args.erase(std::remove_if(args.begin(), args.end(),
                              [](const char* a) { return std::string(a).rfind("--benchmark_out", 0) == 0; }),
               args.end());
  int nargs = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&nargs, args.data());
  if (benchmark::ReportUnrecognizedArguments(nargs, args.data())) MPI_Abort(MPI_COMM_WORLD, 2);
  if (rank == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    NullReporter quiet;
    benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  benchmark::Shutdown();
}

}  // namespace trident::bench
