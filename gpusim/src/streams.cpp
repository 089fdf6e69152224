// Streams and events. Each stream has a worker thread that runs its ops in order, so streams run
// concurrently as on a GPU. An op first waits for what it depends on (an event record another stream
// must reach: cudaStreamWaitEvent; the legacy default stream's implicit ordering with blocking
// streams), then runs. Once the device has a sticky error, kernels, copies and library work are
// skipped (their results would be garbage on a GPU too) while event records still complete, so that
// nothing waits forever on a faulted device.
#include <thread>

#include "cuda_runtime.h"
#include "gpusim/runtime.hpp"
#include "state.hpp"

namespace gpusim {
namespace {

thread_local Device* t_worker_device = nullptr;
thread_local const char* t_work_name = "";

bool complete(const std::pair<Stream*, uint64_t>& w) { return w.first->completed >= w.second; }

void run(Stream* s, Op& op) {
  t_work_name = op.what.c_str();
  if (config().stream_lag_s > 0) {  // a slow GPU: the host runs ahead of every stream
    const double start = op.queued_at + config().stream_lag_s;
    if (const double wait = start - now_s(); wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
  }
  if (s->device->sticky == cudaSuccess || !op.skipped_after_fault) {
    try {
      if (op.work) op.work();
    } catch (const std::exception& e) {
      device_fault(cudaErrorLaunchFailure, std::string("exception: ") + e.what());
    }
  }
  if (op.completed_at) *op.completed_at = now_s();
  t_work_name = "";
}

void worker(Stream* s) {
  t_worker_device = s->device;
  Machine& m = machine();
  std::unique_lock lock(m.lock);
  for (;;) {
    s->has_work.wait(lock, [&] { return !s->queue.empty() || s->destroyed; });
    if (s->queue.empty()) return;  // destroyed and drained
    Op& op = s->queue.front();
    m.progress.wait(lock, [&] {
      for (const auto& w : op.waits)
        if (!complete(w)) return false;
      return true;
    });
    lock.unlock();
    run(s, op);
    lock.lock();
    s->queue.pop_front();
    ++s->completed;
    m.progress.notify_all();
  }
}

Stream* make_stream(Device* d, unsigned flags, bool legacy) {
  auto* s = new Stream;  // never freed: see state.hpp
  s->device = d;
  s->flags = flags;
  s->legacy = legacy;
  {
    std::lock_guard lock(machine().lock);
    d->streams.push_back(s);
    machine().live.insert(s);
  }
  std::thread(worker, s).detach();
  return s;
}

Stream* legacy_stream(Device* d) {
  static std::mutex making;
  std::lock_guard lock(making);
  if (!d->legacy) d->legacy = make_stream(d, cudaStreamDefault, true);
  return d->legacy;
}

// cudaStreamPerThread: a blocking stream of the calling host thread, per device.
Stream* per_thread_stream(Device* d) {
  thread_local std::vector<std::pair<Device*, Stream*>> mine;
  for (auto& [dev, s] : mine)
    if (dev == d) return s;
  mine.emplace_back(d, make_stream(d, cudaStreamDefault, false));
  return mine.back().second;
}

cudaError_t wait_until(const std::vector<std::pair<Stream*, uint64_t>>& marks) {
  Machine& m = machine();
  std::unique_lock lock(m.lock);
  m.progress.wait(lock, [&] {
    for (const auto& w : marks)
      if (!complete(w)) return false;
    return true;
  });
  return cudaSuccess;
}

cudaError_t sticky(Device* d) { return cudaError_t(d->sticky.load()); }

}  // namespace

Device* device_of_worker() { return t_worker_device; }
const char* work_name() { return t_work_name; }

Stream* resolve(cudaStream_t handle) {
  Device* d = current_device();
  if (handle == nullptr || handle == cudaStreamLegacy) return d ? legacy_stream(d) : nullptr;
  if (handle == cudaStreamPerThread) return d ? per_thread_stream(d) : nullptr;
  auto* s = reinterpret_cast<Stream*>(handle);
  std::lock_guard lock(machine().lock);
  return machine().live.count(s) ? s : nullptr;
}

cudaError_t queue_op(Stream* s, Op op, const std::function<void(uint64_t)>& queued) {
  Machine& m = machine();
  op.queued_at = now_s();
  std::lock_guard lock(m.lock);
  // The legacy default stream waits for every blocking stream of its device, and they wait for it.
  if (s->legacy) {
    for (Stream* t : s->device->streams)
      if (t->blocking() && t->queued > t->completed) op.waits.emplace_back(t, t->queued);
  } else if (s->blocking() && s->device->legacy && s->device->legacy->queued > s->device->legacy->completed) {
    op.waits.emplace_back(s->device->legacy, s->device->legacy->queued);
  }
  s->queue.push_back(std::move(op));
  ++s->queued;
  if (queued) queued(s->queued);
  s->has_work.notify_one();
  return cudaSuccess;
}

bool stream_idle(Stream* s) { return s->completed == s->queued; }

cudaError_t wait_stream(Stream* s) {
  uint64_t mark;
  {
    std::lock_guard lock(machine().lock);
    mark = s->queued;
  }
  wait_until({{s, mark}});
  return sticky(s->device);
}

cudaError_t wait_device(Device* d) {
  std::vector<std::pair<Stream*, uint64_t>> marks;
  {
    std::lock_guard lock(machine().lock);
    for (Stream* s : d->streams) marks.emplace_back(s, s->queued);
  }
  wait_until(marks);
  return sticky(d);
}

cudaError_t wait_all_devices() {
  cudaError_t worst = cudaSuccess;
  for (Device* d : machine().devices)
    if (cudaError_t e = wait_device(d); e != cudaSuccess) worst = e;
  return worst;
}

cudaError_t enqueue(cudaStream_t stream, const char* what, std::function<void()> work) {
  Stream* s = resolve(stream);
  if (!s) return record_error(current_device() ? cudaErrorInvalidResourceHandle : cudaErrorNoDevice);
  if (sticky(s->device) != cudaSuccess) return record_error(sticky(s->device));
  Op op;
  op.what = what;
  op.work = std::move(work);
  return queue_op(s, std::move(op));
}

}  // namespace gpusim

using gpusim::Stream;

namespace {

gpusim::Event* event_of(cudaEvent_t e) { return reinterpret_cast<gpusim::Event*>(e); }

}  // namespace

extern "C" {

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int) {
  gpusim::Device* d = gpusim::current_device();
  if (!stream || (flags & ~unsigned(cudaStreamNonBlocking)) != 0) return gpusim::record_error(cudaErrorInvalidValue);
  if (!d) return gpusim::record_error(cudaErrorNoDevice);
  if (d->sticky) return gpusim::record_error(gpusim::sticky(d));
  *stream = reinterpret_cast<cudaStream_t>(gpusim::make_stream(d, flags, false));
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  return cudaStreamCreateWithPriority(stream, flags, 0);
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithPriority(stream, 0, 0); }

// Work already queued still runs; the handle is invalid from now on.
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
    return gpusim::record_error(cudaErrorInvalidResourceHandle);
  Stream* s = gpusim::resolve(stream);
  if (!s) return gpusim::record_error(cudaErrorInvalidResourceHandle);
  std::lock_guard lock(gpusim::machine().lock);
  s->destroyed = true;
  gpusim::machine().live.erase(s);
  s->has_work.notify_one();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  Stream* s = gpusim::resolve(stream);
  if (!s) return gpusim::record_error(cudaErrorInvalidResourceHandle);
  return gpusim::record_error(gpusim::wait_stream(s));
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  Stream* s = gpusim::resolve(stream);
  if (!s) return gpusim::record_error(cudaErrorInvalidResourceHandle);
  if (s->device->sticky) return gpusim::record_error(gpusim::sticky(s->device));
  std::lock_guard lock(gpusim::machine().lock);
  return gpusim::stream_idle(s) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) {
  Stream* s = gpusim::resolve(stream);
  if (!s || !flags) return gpusim::record_error(s ? cudaErrorInvalidValue : cudaErrorInvalidResourceHandle);
  *flags = s->flags;
  return cudaSuccess;
}

// The stream waits for the event's most recent record at the time of this call (none: no wait).
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  Stream* s = gpusim::resolve(stream);
  if (!s || !event) return gpusim::record_error(cudaErrorInvalidResourceHandle);
  if (s->device->sticky) return gpusim::record_error(gpusim::sticky(s->device));
  std::shared_ptr<gpusim::EventRecord> rec;
  {
    std::lock_guard lock(gpusim::machine().lock);
    rec = event_of(event)->last;
  }
  if (!rec) return cudaSuccess;
  gpusim::Op op;
  op.what = "cudaStreamWaitEvent";
  op.waits.emplace_back(rec->stream, rec->sequence);
  op.skipped_after_fault = false;
  return gpusim::queue_op(s, std::move(op));
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  if (!fn) return gpusim::record_error(cudaErrorInvalidValue);
  return gpusim::enqueue(stream, "cudaLaunchHostFunc", [fn, userData] { fn(userData); });
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  constexpr unsigned kKnown = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (!event || (flags & ~kKnown) != 0) return gpusim::record_error(cudaErrorInvalidValue);
  auto* e = new gpusim::Event;
  e->flags = flags;
  *event = reinterpret_cast<cudaEvent_t>(e);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

// A record still pending completes (streams that wait on it keep their own reference).
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event) return gpusim::record_error(cudaErrorInvalidResourceHandle);
  std::lock_guard lock(gpusim::machine().lock);
  delete event_of(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  Stream* s = gpusim::resolve(stream);
  if (!s || !event) return gpusim::record_error(cudaErrorInvalidResourceHandle);
  if (s->device->sticky) return gpusim::record_error(gpusim::sticky(s->device));
  auto rec = std::make_shared<gpusim::EventRecord>();
  rec->stream = s;
  gpusim::Op op;
  op.what = "cudaEventRecord";
  op.skipped_after_fault = false;
  op.completed_at = &rec->completed_at;
  op.work = [keep = rec] {};  // holds the record until the op has run
  return gpusim::queue_op(s, std::move(op), [&](uint64_t sequence) {
    rec->sequence = sequence;
    event_of(event)->last = rec;
  });
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!event) return gpusim::record_error(cudaErrorInvalidResourceHandle);
  std::lock_guard lock(gpusim::machine().lock);
  const auto& rec = event_of(event)->last;
  if (!rec) return cudaSuccess;
  if (rec->stream->device->sticky) return gpusim::record_error(gpusim::sticky(rec->stream->device));
  return rec->stream->completed >= rec->sequence ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event) return gpusim::record_error(cudaErrorInvalidResourceHandle);
  std::shared_ptr<gpusim::EventRecord> rec;
  {
    std::lock_guard lock(gpusim::machine().lock);
    rec = event_of(event)->last;
  }
  if (!rec) return cudaSuccess;
  gpusim::wait_until({{rec->stream, rec->sequence}});
  return gpusim::record_error(gpusim::sticky(rec->stream->device));
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms || !start || !end) return gpusim::record_error(cudaErrorInvalidValue);
  std::lock_guard lock(gpusim::machine().lock);
  gpusim::Event *a = event_of(start), *b = event_of(end);
  if ((a->flags | b->flags) & cudaEventDisableTiming) return gpusim::record_error(cudaErrorInvalidResourceHandle);
  if (!a->last || !b->last) return gpusim::record_error(cudaErrorInvalidResourceHandle);
  if (a->last->stream->completed < a->last->sequence || b->last->stream->completed < b->last->sequence)
    return cudaErrorNotReady;
  *ms = float((b->last->completed_at - a->last->completed_at) * 1e3);
  return cudaSuccess;
}

}  // extern "C"
