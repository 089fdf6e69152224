#pragma once
// One writer per checkpoint directory. Two runs writing one directory destroy each other's work (each
// deletes the other's step_N.h5.tmp and prunes its checkpoints), so the run that trains takes
// DIR/trident.lock at start-up and holds it until it ends:
//
// - the file names its owner (Slurm job id and restart count, host, pid, the process's start time,
//   when it was taken) as one JSON line, and is held with flock(2), which excludes a second process
//   at once on local file systems and on NFSv4; where flock is not coherent across nodes (Lustre
//   mounted with `localflock`, NFSv3) the owner's heartbeat stands in: it touches the file every
//   kHeartbeatS seconds, and a lock untouched for kStaleAfterS seconds belongs to a dead run;
// - a lock left by a run that died (killed, node lost) is taken over with a warning naming it: on the
//   same host when its process is gone, for a later restart of the same Slurm job at once, elsewhere
//   when its heartbeat has stopped;
// - before each checkpoint write the owner checks that the file still names it, so that a second
//   run that slipped past the lock (two starts within the same second on a file system without
//   coherent flock) stops the older one before it overwrites anything, never silently.
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace trident::ckpt {

inline constexpr const char* kLockName = "trident.lock";
inline constexpr double kHeartbeatS = 15;
inline constexpr double kStaleAfterS = 120;

// The run that holds a directory's lock, as written in its lock file.
struct LockOwner {
  std::string job;        // Slurm job id (with "_<array task>"), empty outside Slurm
  int restart = 0;        // SLURM_RESTART_COUNT
  std::string host;
  long pid = 0;
  long long start_ticks = 0;  // the process's start time (/proc/PID/stat field 22): tells a reused pid apart
  std::string since_utc;
  std::string describe() const;  // "Slurm job 42 (restart 0), pid 1234 on node7, since 2026-..."
};

// A live owner of dir's lock other than this process, described for a message; nullopt when the
// directory is free (no lock, or one whose owner is dead). Reads only: for `trident check`.
std::optional<std::string> live_lock_owner(const std::string& dir);

class DirectoryLock {
 public:
  // Takes dir's lock (dir must exist) or throws trident::Error naming the live owner.
  explicit DirectoryLock(const std::string& dir);
  ~DirectoryLock();  // stops the heartbeat and removes the lock file if it still names this run
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  // Throws trident::Error when the lock file no longer names this run (taken over or removed).
  void check_still_held() const;

 private:
  void heartbeat();

  std::string path_;
  int fd_ = -1;
  std::string content_;  // what this run wrote
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread heartbeat_;
};

}  // namespace trident::ckpt
