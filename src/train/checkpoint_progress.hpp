#pragma once
// A long checkpoint write is not silent: while it runs, rank 0 logs every kCheckpointProgressS seconds
// how long it has taken and how much of the file is on disk.
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace trident {

inline constexpr double kCheckpointProgressS = 10.0;

class CheckpointWriteProgress {
 public:
  // Starts reporting on the write of `file` (the final name; its bytes are counted in FILE.tmp, then
  // FILE) for checkpoint `step`.
  CheckpointWriteProgress(int64_t step, std::string file, double interval_s = kCheckpointProgressS);
  ~CheckpointWriteProgress();  // stops reporting
  CheckpointWriteProgress(const CheckpointWriteProgress&) = delete;
  CheckpointWriteProgress& operator=(const CheckpointWriteProgress&) = delete;

 private:
  void report_until_stopped();

  int64_t step_;
  std::string file_;
  double interval_s_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace trident
