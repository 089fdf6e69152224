// Write and read bandwidth of a checkpoint of GPT-2 124M (parameters + both AdamW moments,
// 3 x 124,439,808 floats = 1.49 GB) with tensor parallelism over all ranks (tp = world size).
//
//   mpiexec -n N bench_checkpoint DIR [REPS] [IO]     IO: collective (default) | independent
//
// Per repetition: write_checkpoint (collective HDF5 through MPI-IO, fsync, rename, `latest`), then
// load_checkpoint twice: "cold" after posix_fadvise(DONTNEED) drops the file's (clean, synced)
// pages from the page cache, and "warm" right after. Both loads verify every checksum. Rank 0
// prints one line per measurement; GB = 1e9 bytes of tensor data.
#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/checksum.hpp"
#include "core/log.hpp"
#include "core/mpi_start.hpp"
#include "train/progress.hpp"

using namespace trident;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void fill(std::vector<float>& v, uint64_t seed) {
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = float(int64_t(ckpt::checksum_mix(seed + i) >> 40) - (int64_t(1) << 23)) * 1e-8f;
}

void drop_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  trident::start_mpi(&argc, &argv, TRIDENT_BUILD_MPI_THREADS);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  log::init(rank, size);
  if (argc < 2) {
    if (rank == 0) std::fprintf(stderr, "usage: bench_checkpoint DIR [REPS] [collective|independent]\n");
    MPI_Finalize();
    return 2;
  }
  const std::string dir = argv[1];
  const int reps = argc > 2 ? std::atoi(argv[2]) : 1;
  const std::string io = argc > 3 ? argv[3] : "collective";
  setenv("TRIDENT_CHECKPOINT_IO", io.c_str(), 1);

  Config cfg;
  cfg.model.vocab_size = 50257;
  cfg.model.seq_len = 1024;
  cfg.model.layers = 12;
  cfg.model.hidden = 768;
  cfg.model.heads = 12;
  cfg.model.vocab_pad_to = 128;
  cfg.mesh.tp = size;
  cfg.checkpoint.dir = dir;
  cfg.checkpoint.keep = 1;
  cfg.resolved_toml = "# bench_checkpoint: GPT-2 124M\n";
  const GptShapes shapes = GptShapes::from(cfg.model, size);
  const ParameterLayout layout(shapes, rank, size);
  const int64_t n = layout.total();
  std::vector<float> p(n), m(n), v(n);
  fill(p, 1);
  fill(m, 2);
  fill(v, 3);
  // The vocabulary padding rows stay zero, as in a model (they never reach a checkpoint).
  const auto& wte = layout.find("transformer.wte.weight");
  for (int64_t r = 0; r < wte.shape[0]; ++r)
    if (layout.vocab_begin() + r >= shapes.V)
      for (auto* buf : {&p, &m, &v})
        std::fill(buf->begin() + wte.offset + r * wte.shape[1], buf->begin() + wte.offset + (r + 1) * wte.shape[1], 0.f);
  RankShard shard;
  shard.layout = &layout;
  shard.params = p.data();
  shard.exp_avg = m.data();
  shard.exp_avg_sq = v.data();
  const double gb = 3.0 * double(parameter_count(cfg.model)) * 4 / 1e9;
  if (rank == 0)
    std::printf("# bench_checkpoint: GPT-2 124M, %d rank(s), tp %d, %s transfers, %.3f GB of tensors per checkpoint\n",
                size, size, io.c_str(), gb);

  for (int r = 0; r < reps; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = now();
    const std::string path = write_checkpoint(dir, cfg, shard, progress_after_step(cfg, r + 1, 0.0), MPI_COMM_WORLD);
    const double w = now() - t0;
    if (rank == 0) drop_cache(path);
    MPI_Barrier(MPI_COMM_WORLD);
    std::vector<float> p2(n), m2(n), v2(n);
    RankShard in = shard;
    in.params = p2.data();
    in.exp_avg = m2.data();
    in.exp_avg_sq = v2.data();
    t0 = now();
    load_checkpoint(path, cfg, in, MPI_COMM_WORLD);
    const double cold = now() - t0;
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = now();
    load_checkpoint(path, cfg, in, MPI_COMM_WORLD);
    const double warm = now() - t0;
    int same = p2 == p && m2 == m && v2 == v, all = 0;
    MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rank == 0)
      std::printf("ranks %d  rep %d  write %.2f s %.2f GB/s  read(cold) %.2f s %.2f GB/s  read(warm) %.2f s %.2f GB/s  %s\n",
                  size, r, w, gb / w, cold, gb / cold, warm, gb / warm, all ? "round trip exact" : "MISMATCH");
  }
  // Checksum cost alone (one core): what verification adds to a read.
  if (rank == 0) {
    const double t0 = now();
    const uint64_t s = ckpt::checksum_run(reinterpret_cast<const uint32_t*>(p.data()), n, 0);
    const double t = now() - t0;
    std::printf("checksum alone: %.2f GB/s on one core (%llx)\n", double(n) * 4 / 1e9 / t, (unsigned long long)s);
  }
  MPI_Finalize();
  return 0;
}
