#include "fault/run_job.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

namespace trident::test {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

// Parent pid and command name from /proc/PID/stat ("pid (comm) state ppid ...").
bool read_stat(pid_t pid, pid_t* ppid, std::string* comm) {
  const std::string s = read_text(fmt::format("/proc/{}/stat", pid));
  const auto open = s.find('('), close = s.rfind(')');
  if (open == std::string::npos || close == std::string::npos) return false;
  *comm = s.substr(open + 1, close - open - 1);
  std::istringstream rest(s.substr(close + 2));
  char state = 0;
  rest >> state >> *ppid;
  return bool(rest);
}

std::vector<pid_t> descendants(pid_t root) {
  std::multimap<pid_t, pid_t> children;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    pid_t ppid = 0;
    std::string comm;
    if (read_stat(pid_t(std::stol(name)), &ppid, &comm)) children.emplace(ppid, pid_t(std::stol(name)));
  }
  std::vector<pid_t> out, todo{root};
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    for (auto [it, end] = children.equal_range(p); it != end; ++it) {
      out.push_back(it->second);
      todo.push_back(it->second);
    }
  }
  return out;
}

}  // namespace

BackgroundJob::BackgroundJob(const std::string& command, std::string output_path, int pending_signal)
    : output_path_(std::move(output_path)) {
  pid_ = fork();
  if (pid_ == 0) {
    setpgid(0, 0);
    if (pending_signal != 0) {  // the mask and pending signals survive execve
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, pending_signal);
      sigprocmask(SIG_BLOCK, &set, nullptr);
      raise(pending_signal);
    }
    const std::string full = command + " > '" + output_path_ + "' 2>&1";
    execl("/bin/sh", "sh", "-c", full.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  setpgid(pid_, pid_);
}

BackgroundJob::~BackgroundJob() {
  if (status_ || pid_ <= 0) return;
  for (pid_t p : descendants(pid_)) kill(p, SIGCONT);
  kill(-pid_, SIGKILL);
  for (pid_t p : descendants(pid_)) kill(p, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

std::optional<int> BackgroundJob::wait_for(double seconds) {
  if (status_) return status_;
  wait_until(
      [&] {
        int st = 0;
        if (waitpid(pid_, &st, WNOHANG) != pid_) return false;
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return true;
      },
      seconds);
  return status_;
}

std::string BackgroundJob::output() const { return read_text(output_path_); }

pid_t BackgroundJob::rank_pid(int rank, const std::string& name) const {
  for (pid_t p : descendants(pid_)) {
    pid_t ppid = 0;
    std::string comm;
    if (!read_stat(p, &ppid, &comm) || comm != name) continue;
    const std::string env = read_text(fmt::format("/proc/{}/environ", p));
    std::istringstream vars(env);
    std::string var;
    while (std::getline(vars, var, '\0'))
      if (var == fmt::format("PMI_RANK={}", rank)) return p;
  }
  return -1;
}

pid_t BackgroundJob::process_named(const std::string& name) const {
  std::vector<pid_t> candidates{pid_};  // the job's own process, once its command `exec`s
  for (pid_t p : descendants(pid_)) candidates.push_back(p);
  for (pid_t p : candidates) {
    pid_t ppid = 0;
    std::string comm;
    if (read_stat(p, &ppid, &comm) && comm == name) return p;
  }
  return -1;
}

bool catches_signal(pid_t pid, int sig) {
  std::istringstream status(read_text(fmt::format("/proc/{}/status", pid)));
  for (std::string line; std::getline(status, line);)
    if (line.rfind("SigCgt:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) >> (sig - 1)) & 1;
  return false;
}

bool wait_until(const std::function<bool()>& done, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

int count_lines(const std::string& path) {
  std::ifstream f(path);
  int n = 0;
  for (std::string line; std::getline(f, line);) ++n;
  return n;
}

std::string small_deck(int tp, int pp, int dp, const std::string& runtime_extra) {
  return fmt::format(R"([model]
vocab_size = 256
seq_len = 32
layers = 4
hidden = 32
heads = 4

[mesh]
tp = {}
pp = {}
dp = {}

[train]
steps = 100000
micro_batch = 1
global_batch = {}
lr = 1e-3

[data]
format = "text"
path = "/usr/share/common-licenses/GPL-3"

[runtime]
mpi_wait = "poll"
{}
)",
                     tp, pp, dp, 2 * dp, runtime_extra);
}

}  // namespace trident::test
