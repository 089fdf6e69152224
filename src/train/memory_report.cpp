#include "train/memory_report.hpp"

#include <mpi.h>

#include <array>
#include <vector>

#include "comm/watchdog.hpp"
#include "core/log.hpp"

namespace trident {

void log_memory_per_rank(const MemoryAccount& mine, ParallelMesh* mesh) {
  const Coord c = mesh ? mesh->coord() : Coord{};
  constexpr int kFields = 9;
  const std::array<int64_t, kFields> row = {c.dp,          c.pp,          c.tp,          mine.parameters, mine.gradients,
                                            mine.optimizer, mine.activations, mine.buffers, mine.peak_rss};
  const int size = mesh ? mesh->world_size() : 1;
  std::vector<int64_t> all(size_t(size) * kFields);
  if (mesh) {
    const watchdog::Watch watch("memory report gather (MPI_COMM_WORLD)", watchdog::collective_limit_s());
    MPI_Gather(row.data(), kFields, MPI_INT64_T, all.data(), kFields, MPI_INT64_T, 0, mesh->world().mpi_comm());
  } else {
    std::copy(row.begin(), row.end(), all.begin());
  }
  if (!log::is_root()) return;
  int64_t worst = 0;
  for (int r = 0; r < size; ++r) {
    const int64_t* f = all.data() + size_t(r) * kFields;
    MemoryAccount a;
    a.parameters = f[3];
    a.gradients = f[4];
    a.optimizer = f[5];
    a.activations = f[6];
    a.buffers = f[7];
    a.peak_rss = f[8];
    worst = std::max(worst, a.peak_rss);
    log::info("memory of rank {} (dp {}, pp {}, tp {}): {}", r, f[0], f[1], f[2], describe(a));
  }
  log::info("memory: the largest peak RSS of a rank is {:.1f} MiB", double(worst) / 1048576.0);
}

}  // namespace trident
