#include "checkpoint/directory_lock.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/regular_file.hpp"
#include "core/slurm_env.hpp"
#include "core/utc_time.hpp"

namespace trident::ckpt {
namespace {

constexpr size_t kMaxLockBytes = 65536;

std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

// Field 22 of /proc/PID/stat (start time in clock ticks since boot); 0 when the process is gone.
long long process_start_ticks(long pid) {
  std::ifstream f(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  std::getline(f, stat);
  const size_t paren = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos) return 0;
  std::istringstream rest(stat.substr(paren + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i)
    if (i == 22) return std::stoll(field);
  return 0;
}


LockOwner this_run() {
  LockOwner o;
  if (slurm_job()) {  // outside Slurm the run id is a time and pid: the lock names those itself
    const RunIdentity run = run_identity();
    o.job = run.run_id;
    o.restart = run.restart;
  }
  o.host = host_name();
  o.pid = long(::getpid());
  o.start_ticks = process_start_ticks(o.pid);
  o.since_utc = utc_timestamp();
  return o;
}

std::string to_text(const LockOwner& o) {
  return nlohmann::json{{"job", o.job},           {"restart", o.restart},       {"host", o.host},
                        {"pid", o.pid},           {"start_ticks", o.start_ticks}, {"since_utc", o.since_utc}}
             .dump() +
         "\n";
}

std::optional<LockOwner> parse(const std::string& text) {
  try {
    const auto j = nlohmann::json::parse(text);
    LockOwner o;
    o.job = j.at("job").get<std::string>();
    o.restart = j.at("restart").get<int>();
    o.host = j.at("host").get<std::string>();
    o.pid = j.at("pid").get<long>();
    o.start_ticks = j.at("start_ticks").get<long long>();
    o.since_utc = j.at("since_utc").get<std::string>();
    return o;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool is_this_process(const LockOwner& o) { return o.host == host_name() && o.pid == long(::getpid()); }

double seconds_since_modified(const struct stat& st) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration<double>(now).count() - (double(st.st_mtim.tv_sec) + 1e-9 * double(st.st_mtim.tv_nsec));
}

// Why the run that wrote `owner` is certainly not running any more; empty when it may be.
std::string why_dead(const LockOwner& owner, double idle_s) {
  const LockOwner me = this_run();
  if (owner.host == me.host) {
    if (::kill(pid_t(owner.pid), 0) != 0 && errno == ESRCH) return fmt::format("process {} is gone", owner.pid);
    if (process_start_ticks(owner.pid) != owner.start_ticks)
      return fmt::format("process {} is gone (its pid now belongs to another process)", owner.pid);
    return "";
  }
  if (!owner.job.empty() && owner.job == me.job && owner.restart < me.restart)
    return fmt::format("it was restart {} of this Slurm job, which Slurm ended before this restart {}", owner.restart,
                       me.restart);
  if (idle_s > kStaleAfterS)
    return fmt::format("its heartbeat stopped {:.0f} s ago (limit {:.0f} s; it ran on another host)", idle_s,
                       kStaleAfterS);
  return "";
}

std::string busy_message(const std::string& dir, const std::string& owner) {
  return fmt::format(
      "[checkpoint] dir = \"{}\" is in use by {}: two runs writing one checkpoint directory destroy each other's "
      "checkpoints. Wait until that run ends, or give this one another checkpoint.dir (a lock whose run died is "
      "taken over by itself: at once on the same host or for a restart of the same Slurm job, from another host "
      "{:.0f} s after its heartbeat stops)",
      dir, owner, kStaleAfterS);
}

std::string read_fd(int fd) {
  std::string text(kMaxLockBytes, '\0');
  const ssize_t n = ::pread(fd, text.data(), text.size(), 0);
  text.resize(n > 0 ? size_t(n) : 0);
  return text;
}

// Refuses a lock path that is not a regular file (a FIFO would block, a directory cannot be written).
void require_lock_file_kind(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw Error(fmt::format("{} is {}, not trident's lock file: remove it", path, file_type_name(st.st_mode)));
}

}  // namespace

std::string LockOwner::describe() const {
  return fmt::format("{}pid {} on {}, since {}",
                     job.empty() ? std::string() : fmt::format("Slurm job {} (restart {}), ", job, restart), pid, host,
                     since_utc);
}

std::optional<std::string> live_lock_owner(const std::string& dir) {
  const std::string path = dir + "/" + kLockName;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  require_lock_file_kind(path);
  const auto owner = parse(read_small_file(path, kMaxLockBytes));
  if (!owner || is_this_process(*owner) || !why_dead(*owner, seconds_since_modified(st)).empty()) return std::nullopt;
  return owner->describe();
}

DirectoryLock::DirectoryLock(const std::string& dir) : path_(dir + "/" + kLockName) {
  require_lock_file_kind(path_);
  // The file may be removed by its owner between our open and our flock: then the lock we got is on a
  // file nobody else can see. Try again until the locked file is the one the directory names.
  for (int attempt = 0;; ++attempt) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd_ < 0) throw Error(fmt::format("cannot open the lock file {}: {}", path_, std::strerror(errno)));
    const bool held_elsewhere = ::flock(fd_, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    struct stat mine {}, named {};
    ::fstat(fd_, &mine);
    const bool same_file = ::stat(path_.c_str(), &named) == 0 && named.st_ino == mine.st_ino;
    if (!same_file && !held_elsewhere && attempt < 10) {
      ::close(fd_);
      continue;
    }
    const auto owner = parse(read_fd(fd_));
    if (held_elsewhere) {
      ::close(fd_);
      throw Error(busy_message(dir, owner ? owner->describe() : "another process (its lock file is being written)"));
    }
    if (owner && !is_this_process(*owner)) {
      const std::string reason = why_dead(*owner, seconds_since_modified(mine));
      if (reason.empty()) {
        ::close(fd_);
        throw Error(busy_message(dir, owner->describe()));
      }
      log::warn("checkpoint: {} was locked by {}, which is no longer running ({}): this run takes it over", dir,
                owner->describe(), reason);
    }
    break;
  }
  content_ = to_text(this_run());
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, content_.data(), content_.size(), 0) != ssize_t(content_.size()) ||
      ::fsync(fd_) != 0) {
    const int err = errno;
    ::close(fd_);
    throw Error(fmt::format("cannot write the lock file {}: {}", path_, std::strerror(err)));
  }
  heartbeat_ = std::thread([this] { heartbeat(); });
}

DirectoryLock::~DirectoryLock() {
  {
    const std::lock_guard<std::mutex> guard(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  struct stat mine {}, named {};
  const bool same_file =
      ::fstat(fd_, &mine) == 0 && ::stat(path_.c_str(), &named) == 0 && named.st_ino == mine.st_ino;
  if (same_file && read_fd(fd_) == content_) ::unlink(path_.c_str());
  ::close(fd_);
}

void DirectoryLock::check_still_held() const {
  struct stat mine {}, named {};
  ::fstat(fd_, &mine);
  if (::stat(path_.c_str(), &named) != 0 || named.st_ino != mine.st_ino)
    throw Error(fmt::format("{} was removed while this run held it: another run may be writing this checkpoint "
                            "directory; stopping before writing a checkpoint over its files",
                            path_));
  std::string now = read_fd(fd_);
  if (now == content_) return;
  // Another run may be writing the file this moment (a lock is rewritten in place): what it read may be
  // empty or cut short, so give the write up to a second to land before naming the new holder.
  auto owner = parse(now);
  for (int tries = 0; tries < 20 && !owner && now != content_; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    now = read_fd(fd_);
    owner = parse(now);
  }
  if (now == content_) return;
  throw Error(fmt::format("{} now names {}: another run took over this checkpoint directory; stopping before "
                          "writing a checkpoint over its files",
                          path_, owner ? owner->describe() : "something else"));
}

void DirectoryLock::heartbeat() {
  std::unique_lock<std::mutex> guard(mutex_);
  while (!wake_.wait_for(guard, std::chrono::duration<double>(kHeartbeatS), [this] { return stopping_; }))
    ::futimens(fd_, nullptr);  // mtime = now: other hosts read it as "still running"
}

}  // namespace trident::ckpt
