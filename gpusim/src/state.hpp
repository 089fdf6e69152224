#pragma once
// The simulated machine: devices, streams and events, and the one lock + condition variable through
// which every completion is announced. Objects live for the whole process (a destroyed stream's
// object stays, so that work queued elsewhere may still wait on it); nothing here is ever freed, so
// worker threads stay safe while the process exits.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "gpusim/driver_types.h"

namespace gpusim {

struct Stream;

struct Device {
  int ordinal = 0;   // index among the visible devices (cudaSetDevice's argument)
  int physical = 0;  // index among the node's simulated GPUs
  cudaDeviceProp prop{};
  std::atomic<size_t> allocated{0};
  std::atomic<int> sticky{cudaSuccess};  // the first device fault; every later call returns it
  std::vector<Stream*> streams;          // every stream made on it (guarded by machine().lock)
  Stream* legacy = nullptr;              // the NULL stream, made on first use
};

// A queued piece of work and what it waits for first.
struct Op {
  std::string what;
  std::function<void()> work;
  std::vector<std::pair<Stream*, uint64_t>> waits;  // (stream, sequence number) that must be complete
  double queued_at = 0;                             // seconds, steady clock
  bool skipped_after_fault = true;                  // false for event records (waits must not hang)
  double* completed_at = nullptr;                   // an event record's timestamp, written when it runs
};

struct Stream {
  Device* device = nullptr;
  unsigned flags = 0;
  bool legacy = false;
  bool destroyed = false;
  std::deque<Op> queue;   // guarded by machine().lock
  uint64_t queued = 0;     // sequence number of the last op queued
  uint64_t completed = 0;  // ... and of the last one completed (ops complete in order)
  std::condition_variable has_work;
  bool blocking() const { return !legacy && (flags & cudaStreamNonBlocking) == 0; }
};

struct EventRecord {
  Stream* stream = nullptr;
  uint64_t sequence = 0;
  double completed_at = 0;
};

struct Event {
  unsigned flags = 0;
  std::shared_ptr<EventRecord> last;  // the most recent cudaEventRecord; null before the first
};

struct Machine {
  std::mutex lock;
  std::condition_variable progress;  // notified whenever an op completes
  std::vector<Device*> devices;      // the visible ones, by ordinal
  std::unordered_set<Stream*> live;  // streams not destroyed (handles that may be used)
};

Machine& machine();            // made on first use, never destroyed
Device* current_device();      // the calling thread's (cudaSetDevice), nullptr without a device
Device* device_of_worker();    // inside queued work: the device of the stream running it
const char* work_name();       // inside queued work: its name
double now_s();

// Streams (streams.cpp). resolve: the Stream for a handle (nullptr, cudaStreamLegacy and
// cudaStreamPerThread included) or nullptr when the handle is unknown or destroyed.
Stream* resolve(cudaStream_t handle);
// Queues op on s, with the legacy stream's implicit ordering added; `queued` (if set) is called under
// the lock with the op's sequence number (an event record notes it there).
cudaError_t queue_op(Stream* s, Op op, const std::function<void(uint64_t)>& queued = {});
bool stream_idle(Stream* s);             // guarded by machine().lock
// Waits until every op queued on s so far has completed; returns the device's sticky error if any.
cudaError_t wait_stream(Stream* s);
cudaError_t wait_device(Device* d);
cudaError_t wait_all_devices();

// Configuration from the environment (config.cpp; gpusim/README.md lists the variables).
struct Config {
  int gpus_per_node = 8;
  size_t memory_bytes = 0;  // 0: the H100's
  bool reverse_threads = false;
  enum class BlockOrder { Forward, Reverse, Shuffle } block_order = BlockOrder::Shuffle;
  double stream_lag_s = 0;
  size_t fiber_stack_bytes = 0;
  bool profile = false;
};
const Config& config();

}  // namespace gpusim
