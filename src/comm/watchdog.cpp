#include "comm/watchdog.hpp"

#include <mpi.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/group.hpp"
#include "core/error.hpp"
#include "core/fatal.hpp"

namespace trident::watchdog {
namespace {

struct State {
  std::mutex mutex;
  std::condition_variable wake;
  bool running = false;
  bool stopping = false;
  bool has_activity = false;
  Activity activity;
  double collective_s = 0, checkpoint_s = 0;
  int world_rank = 0;
  std::vector<DeviceWork*> device_work;
  std::thread thread;
};

State& state() {
  static State s;
  return s;
}

std::atomic<bool> g_running{false};
std::atomic<int64_t> g_step{0};

// The ranks the waiting rank was waiting on, in world ranks.
std::vector<int> awaited_world_ranks(const Group& g, int peer) {
  const auto& world = g.world_ranks();
  if (peer >= 0) return {world[size_t(peer)]};
  std::vector<int> others;
  for (int r = 0; r < g.size(); ++r)
    if (r != g.rank()) others.push_back(world[size_t(r)]);
  return others;
}

std::string describe_timeout(const Activity& a, double waited_s, int64_t step) {
  const std::string limit_key = a.limit_s > state().collective_s ? "runtime.checkpoint_timeout_s"
                                                                  : "runtime.collective_timeout_s";
  const std::string at_step = step > 0 ? fmt::format("at step {}", step) : std::string("before the first step");
  if (!a.group)
    return fmt::format("watchdog: {} has not completed after {:.1f} s ({} = {:g}) {}; a rank has stopped or is "
                       "stuck",
                       a.operation, waited_s, limit_key, a.limit_s, at_step);
  const Group& g = *a.group;
  const auto awaited = awaited_world_ranks(g, a.peer);
  const std::string who =
      a.peer >= 0 ? fmt::format("rank that did not arrive: world rank {}", awaited.front())
                  : fmt::format("ranks that did not arrive: among world ranks {} (the group's other members)",
                                fmt::join(awaited, ", "));
  return fmt::format("watchdog: {} on group '{}' (world ranks {}) has not completed after {:.1f} s ({} = {:g}) {}; "
                     "{}",
                     a.operation, g.name(), fmt::join(g.world_ranks(), ", "), waited_s, limit_key, a.limit_s,
                     at_step, who);
}

// What ends the job now, if anything: the host wait past its limit, else an NCCL error or an NCCL
// operation past the collective limit. Called with the state's lock held.
std::string overdue(State& s) {
  if (s.has_activity) {
    const double waited = now_s() - s.activity.start_s;
    // The group cannot go away while the lock is held: the Watch that names it waits for the lock.
    if (waited > s.activity.limit_s) return describe_timeout(s.activity, waited, g_step.load());
  }
  if (s.collective_s <= 0) return {};
  for (DeviceWork* w : s.device_work) {
    if (std::string error = w->async_error(); !error.empty())
      return fmt::format("watchdog: {} at step {}", error, g_step.load());
    if (auto a = w->oldest_unfinished()) {
      a->limit_s = s.collective_s;
      const double waited = now_s() - a->start_s;
      if (waited > a->limit_s) return describe_timeout(*a, waited, g_step.load());
    }
  }
  return {};
}

// Aborts the NCCL communicators, so that their kernels stop before the job ends. An abort may itself wait
// on the device, so it runs on a thread of its own and the job ends after at most a few seconds anyway.
void abort_device_work(const std::vector<DeviceWork*>& work) {
  if (work.empty()) return;
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread([work, done] {
    for (DeviceWork* w : work) w->abort();
    *done = true;
  }).detach();
  for (int i = 0; i < 30 && !*done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

void monitor_loop(double period_s) {
  State& s = state();
  std::unique_lock lock(s.mutex);
  while (!s.stopping) {
    s.wake.wait_for(lock, std::chrono::duration<double>(period_s));
    if (s.stopping) continue;
    const std::string message = overdue(s);
    if (message.empty()) continue;
    abort_device_work(s.device_work);
    const double stagger = std::min(0.3 * s.world_rank, 3.0);
    lock.unlock();
    // In a stalled job many ranks time out within milliseconds of each other. Lower ranks speak
    // first, 0.3 s apart (more than abort_job's pause for the launcher), so that one message, the
    // lowest waiting rank's, ends the job; ranks beyond the 3 s cap may add theirs.
    std::this_thread::sleep_for(std::chrono::duration<double>(stagger));
    abort_job(message.c_str(), kWatchdogExitCode);
  }
}

}  // namespace

Monitor::Monitor(double collective_timeout_s, double checkpoint_timeout_s) {
  State& s = state();
  TRIDENT_CHECK(!s.running, "internal: a second watchdog Monitor");
  s.collective_s = collective_timeout_s;
  s.checkpoint_s = checkpoint_timeout_s > 0 ? std::max(checkpoint_timeout_s, collective_timeout_s) : 0;
  if (collective_timeout_s <= 0 && checkpoint_timeout_s <= 0) return;
  MPI_Comm_rank(MPI_COMM_WORLD, &s.world_rank);
  s.running = true;
  s.stopping = false;
  // Checked often enough that the job ends within about 5% of the shortest limit after it.
  const double shortest = collective_timeout_s > 0 ? collective_timeout_s : checkpoint_timeout_s;
  const double period = std::clamp(shortest / 20, 0.01, 1.0);
  s.thread = std::thread(monitor_loop, period);
  g_running = true;
}

Monitor::~Monitor() {
  State& s = state();
  g_running = false;
  if (s.running) {
    {
      std::lock_guard lock(s.mutex);
      s.stopping = true;
    }
    s.wake.notify_all();
    s.thread.join();
  }
  s.running = false;
  s.has_activity = false;
  s.collective_s = s.checkpoint_s = 0;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void add_device_work(DeviceWork* work) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.device_work.push_back(work);
}

void remove_device_work(DeviceWork* work) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.device_work.erase(std::remove(s.device_work.begin(), s.device_work.end(), work), s.device_work.end());
}

double collective_limit_s() { return state().collective_s; }
double checkpoint_limit_s() { return state().checkpoint_s; }

void set_step(int64_t step) { g_step = step; }

Watch::Watch(const char* operation, const Group& group, int peer) {
  if (g_running) enter(Activity{operation, &group, peer, state().collective_s, 0});
}

Watch::Watch(const char* operation, double limit_s) {
  if (g_running) enter(Activity{operation, nullptr, -1, limit_s, 0});
}

void Watch::enter(Activity activity) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  had_previous_ = s.has_activity;
  previous_ = s.activity;
  if (had_previous_) activity.limit_s = std::max(activity.limit_s, previous_.limit_s);
  if (activity.limit_s <= 0) return;  // this kind of operation is not watched
  activity.start_s = now_s();
  s.activity = activity;
  s.has_activity = true;
  active_ = true;
}

Watch::~Watch() {
  if (!active_) return;
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.activity = previous_;
  s.has_activity = had_previous_;
}

}  // namespace trident::watchdog
