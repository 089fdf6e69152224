#pragma once
// The communication watchdog: a rank that stops (SIGSTOP, a hung file system, a stuck device) must not
// leave the others waiting forever. Every blocking communication point marks the operation in flight
// with a Watch (operation, group, peer); a monitor thread compares its age with the limit and, past it,
// logs one message naming the operation, the group, the step and the ranks that did not arrive, then
// ends the whole job (MPI_Abort, exit code kWatchdogExitCode).
//
// Which ranks did not arrive: for a send or receive, the peer. For a collective, the group's other
// members: finding the laggards exactly would need an answer from the other ranks, and the missing one
// cannot answer while the others are inside the very collective it never joined; so the message names
// the group's other members as the candidates. In a stalled job every rank times out at about the same
// time: ranks report in rank order, 0.3 s apart, so that one message ends the job. Cost on the hot path:
// one uncontended mutex and one clock read per wait.
#include <cstdint>
#include <optional>
#include <string>

namespace trident {

class Group;

namespace watchdog {

inline constexpr int kWatchdogExitCode = 4;

// Runs the monitor thread for its lifetime (one per process). A limit of 0 turns the watchdog off.
class Monitor {
 public:
  Monitor(double collective_timeout_s, double checkpoint_timeout_s);
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;
};

// The limits of the running Monitor (0 when none runs).
double collective_limit_s();
double checkpoint_limit_s();

// The training step reported in the watchdog's message.
void set_step(int64_t step);

// What is in flight: an operation, on a group or not, since start_s with limit_s to complete.
struct Activity {
  const char* operation = nullptr;
  const Group* group = nullptr;  // null: a phase that is not one group's communication
  int peer = -1;                 // group rank of the send/recv partner; -1 for a collective
  double limit_s = 0;
  double start_s = 0;
};

// Work the host does not wait for: NCCL operations run on a GPU stream while the host goes on, so a
// hung one shows as no host wait at all (until some later copy blocks without a name). Each NCCL
// communicator registers itself; every period the monitor asks each for its asynchronous error and
// its oldest unfinished operation, and when there is an error, or that operation is older than the
// collective limit, it aborts every registered communicator and ends the job with the operation,
// group and step named. Its calls come from the monitor thread.
class DeviceWork {
 public:
  virtual ~DeviceWork() = default;
  // Operation, group and start (on now_s()'s clock) of the oldest operation queued and not finished.
  virtual std::optional<Activity> oldest_unfinished() = 0;
  virtual std::string async_error() = 0;  // empty when there is none
  virtual void abort() = 0;               // the job is about to end: stop the device work
};
void add_device_work(DeviceWork* work);
void remove_device_work(DeviceWork* work);
double now_s();  // the watchdog's clock (steady, seconds)

// Marks an operation in flight for its lifetime. Nested watches keep the longer of the two limits
// (a collective inside a checkpoint write gets the checkpoint's limit). Does nothing when no Monitor
// runs or the limit is 0.
class Watch {
 public:
  // A communication on `group`: peer is the group rank of a send/recv partner, -1 for a collective.
  Watch(const char* operation, const Group& group, int peer = -1);
  // A phase with its own limit (a checkpoint write, the communicator set-up).
  Watch(const char* operation, double limit_s);
  ~Watch();
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;

 private:
  void enter(Activity activity);
  bool active_ = false;
  bool had_previous_ = false;
  Activity previous_;
};

}  // namespace watchdog
}  // namespace trident
