#include "train/checkpoint_progress.hpp"

#include <sys/stat.h>

#include <chrono>

#include "core/log.hpp"

namespace trident {
namespace {

int64_t bytes_on_disk(const std::string& file) {
  struct stat st {};
  if (::stat((file + ".tmp").c_str(), &st) == 0 || ::stat(file.c_str(), &st) == 0) return int64_t(st.st_size);
  return 0;
}

}  // namespace

CheckpointWriteProgress::CheckpointWriteProgress(int64_t step, std::string file, double interval_s)
    : step_(step), file_(std::move(file)), interval_s_(interval_s), thread_([this] { report_until_stopped(); }) {}

CheckpointWriteProgress::~CheckpointWriteProgress() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void CheckpointWriteProgress::report_until_stopped() {
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  for (int n = 1;; ++n) {
    const auto next = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                  std::chrono::duration<double>(interval_s_ * n));
    if (wake_.wait_until(lock, next, [this] { return stop_; })) return;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double gb = double(bytes_on_disk(file_)) / 1e9;
    log::info("checkpoint: step {}: still writing {} after {:.0f} s: {:.3f} GB on disk so far ({:.3g} GB/s)", step_,
              file_, s, gb, gb / s);
  }
}

}  // namespace trident
