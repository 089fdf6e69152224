// When to write a checkpoint: steps, minutes, the end, requests (signals).
#include <fmt/format.h>

#include <chrono>
#include <csignal>

#include "checkpoint/checkpoint.hpp"

namespace trident {
namespace {

// Incremented by request_checkpoint() (possibly in a signal handler); only read elsewhere.
volatile std::sig_atomic_t g_requests = 0;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void request_checkpoint() noexcept { g_requests = g_requests + 1; }

CheckpointSchedule::CheckpointSchedule(const CheckpointConfig& cfg, int64_t last_step, MPI_Comm comm)
    : cfg_(cfg), last_step_(last_step), comm_(comm), enabled_(!cfg.dir.empty()), last_time_(now_seconds()) {
  handled_requests_ = g_requests;
}

CheckpointSchedule::Decision CheckpointSchedule::should_write(int64_t step) {
  Decision d;
  if (!enabled_) return d;
  const long requests = g_requests;
  int rank = 0;
  MPI_Comm_rank(comm_, &rank);
  int flags = 0;
  if (requests != handled_requests_) flags |= 1;
  if (rank == 0 && cfg_.every_minutes > 0 && now_seconds() - last_time_ >= cfg_.every_minutes * 60.0) flags |= 2;
  int all = 0;
  MPI_Allreduce(&flags, &all, 1, MPI_INT, MPI_BOR, comm_);
  if (cfg_.every_steps > 0 && step % cfg_.every_steps == 0) {
    d.reason = "every " + std::to_string(cfg_.every_steps) + " steps";
  } else if (all & 2) {
    d.reason = fmt::format("every {:g} minutes", cfg_.every_minutes);
  } else if (step == last_step_) {
    d.reason = "end of training";
  } else if (all & 1) {
    d.reason = "requested";
  }
  d.write = !d.reason.empty();
  if (d.write) {
    last_time_ = now_seconds();
    handled_requests_ = requests;
  }
  return d;
}

}  // namespace trident
