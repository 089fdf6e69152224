// The block runner (see block_runner.hpp) and the device built-ins that switch between the threads of
// a block: barriers, shuffles, votes.
//
// A block starts in direct mode: its threads run one after another as plain calls on the worker
// thread's stack, which is all a kernel without barriers and warp operations needs (most kernels: a
// few nanoseconds a thread). The first thread that has to wait turns the block into fibers: its frames
// stay on the worker stack (it becomes that stack's fiber), a scheduler fiber starts on a stack of its
// own, and the other threads start as fibers when they first run, each on a stack taken from the
// worker's pool and given back when it ends. A thread that waits or ends switches straight to the next
// ready thread; only when none is ready does control go back to the scheduler, which then reports a
// block that can never continue. At the end of the block the scheduler returns to run_block on the
// worker stack (resuming the worker stack's fiber with an AbandonBlock exception when a fault left it
// waiting, so that its frames unwind).
#include "block_runner.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <boost/context/detail/fcontext.hpp>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <vector>

#include "cuda_runtime.h"
#include "state.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

__thread uint3 threadIdx;
__thread uint3 blockIdx;
__thread uint3 blockDim;
__thread uint3 gridDim;

namespace gpusim {
namespace {

namespace bc = boost::context::detail;

enum class State { NotStarted, Ready, AtBlockBarrier, AtWarpOperation, Done };
enum class WarpOp { None, Shuffle, Ballot, Syncwarp, Collective };

// A fiber stack with a guard page below it (a stack overflow faults instead of corrupting memory).
struct Stack {
  char* bottom = nullptr;  // lowest usable address
  size_t size = 0;
  size_t colour = 0;   // offset of the first frame below the top (stacks start on different cache sets)
  bool dirty = false;  // a fiber was abandoned on it (AddressSanitizer's shadow must be cleared)
};

// The worker thread's stacks; those not in use are free.
class StackPool {
 public:
  Stack* take() {
    if (free_.empty()) grow();
    Stack* s = free_.back();
    free_.pop_back();
#if defined(__SANITIZE_ADDRESS__)
    if (s->dirty) ASAN_UNPOISON_MEMORY_REGION(s->bottom, s->size);
#endif
    s->dirty = false;
    return s;
  }
  void give_back(Stack* s) { free_.push_back(s); }

 private:
  void grow() {
    const size_t page = size_t(sysconf(_SC_PAGESIZE)), size = config().fiber_stack_bytes;
    void* p = mmap(nullptr, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "gpu-sim: cannot map a %zu-byte fiber stack\n", size);
      std::abort();
    }
    mprotect(p, page, PROT_NONE);
    const size_t i = all_.size();
    all_.push_back(new Stack{static_cast<char*>(p) + page, size, (i % 64) * 64 + (i % 8) * 4096, false});
    free_.push_back(all_.back());
  }
  std::vector<Stack*> all_, free_;
};

struct Request {  // one lane's part of a warp operation
  uint64_t bits = 0;
  detail::ShuffleMode mode = detail::ShuffleMode::Index;
  unsigned b = 0, c = 0;
  int predicate = 0;
  void* arguments = nullptr;  // a warp collective's (its lane's arguments, its completion)
  detail::WarpCollective collective = nullptr;
};

struct Warp {
  unsigned exists = 0;    // lanes of this warp that the block has
  unsigned live = 0;      // ... and that have not exited
  unsigned expected = 0;  // the mask of the operation being gathered (0: none)
  unsigned arrived = 0;
  WarpOp op = WarpOp::None;
  // Warp operations completed so far, and when each lane exited (__activemask: a lane that exited
  // after the caller's last warp operation was still converged with it).
  uint64_t epoch = 0;
  uint64_t exit_epoch[32];
  Request requests[32];
};

struct Fiber {
  bc::fcontext_t context = nullptr;
  State state = State::NotStarted;
  uint3 index{};
  unsigned linear = 0;
  uint64_t result = 0;      // of the last warp operation or block reduction
  uint64_t warp_epoch = 0;  // its warp's epoch after its last warp operation
  Stack* stack = nullptr;   // null for the fiber on the worker stack
  void* asan_fake_stack = nullptr;
};

// Thrown into the worker stack's fiber to unwind it when its block faulted while it waited.
struct AbandonBlock {};

// One block's run; the vectors keep their capacity from block to block of the worker thread.
struct Block {
  const KernelLaunch* launch = nullptr;
  unsigned char* dynamic_shared = nullptr;
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  std::deque<Fiber*> ready;  // released threads, in the order they will run (before unstarted ones)
  size_t started = 0;        // threads started so far, in thread order
  int live = 0;
  int at_barrier = 0;
  int reduce_accumulator = 0;  // __syncthreads_count/and/or of the barrier being gathered
  Fiber* current = nullptr;
  Stack* ended_on = nullptr;  // the stack of a fiber that just ended, freed once it is left
  bool direct = true;         // no thread has waited yet: threads run as plain calls
  Fiber* on_worker = nullptr;  // the fiber whose frames are on the worker stack
  Stack* scheduler_stack = nullptr;
  bc::fcontext_t scheduler = nullptr;
  bc::fcontext_t worker_return = nullptr;  // run_block, after the worker stack's fiber ended
  void* worker_fake_stack = nullptr;
  std::optional<BlockFault> fault;
};

thread_local Block t_block_storage;
thread_local Block* t_block = nullptr;  // the block running on this worker thread, if any
thread_local StackPool t_stacks;

Block& block_of_caller(const char* what) {
  if (!t_block || !t_block->current) {
    std::fprintf(stderr, "gpu-sim: %s called outside a kernel\n", what);
    std::abort();
  }
  return *t_block;
}

std::string thread_name(const Fiber& f) {
  return "thread (" + std::to_string(f.index.x) + "," + std::to_string(f.index.y) + "," + std::to_string(f.index.z) +
         ")";
}

// ---- switching ----

// Released by a barrier: after the threads already waiting to run. Released by a warp operation:
// first, so that a warp runs its lanes' warp-synchronous code on while their stacks are in cache.
void make_ready(Block& b, Fiber& f, bool first = false) {
  f.state = State::Ready;
  if (first)
    b.ready.push_front(&f);
  else
    b.ready.push_back(&f);
}

Fiber* next_ready(Block& b) {
  if (!b.ready.empty()) {
    Fiber* f = b.ready.front();
    b.ready.pop_front();
    return f;
  }
  const size_t n = b.fibers.size();
  if (b.started == n) return nullptr;
  const size_t k = b.started++;
  return &b.fibers[config().reverse_threads ? n - 1 - k : k];
}

void fiber_main(bc::transfer_t t);

// Whoever runs next frees the stack of a fiber that ended (it could not free the one it ran on).
void after_switch(Block& b, const bc::transfer_t& t) {
  *static_cast<bc::fcontext_t*>(t.data) = t.fctx;  // the context of the party that switched here
  if (b.ended_on) {
    t_stacks.give_back(b.ended_on);
    b.ended_on = nullptr;
  }
}

void scheduler_main(bc::transfer_t t);
std::string describe_deadlock(const Block& b);

#if defined(__SANITIZE_ADDRESS__)
// The worker thread's own stack (for AddressSanitizer's fiber switches; learnt at the first switch).
thread_local const void* t_worker_stack_bottom = nullptr;
thread_local size_t t_worker_stack_size = 0;

void asan_start(void** fake, const Stack* s) {
  __sanitizer_start_switch_fiber(fake, s ? s->bottom : t_worker_stack_bottom, s ? s->size : t_worker_stack_size);
}
void asan_finish(void* fake) {
  const void* bottom = nullptr;
  size_t size = 0;
  __sanitizer_finish_switch_fiber(fake, &bottom, &size);
  if (t_worker_stack_size == 0 && !fake) {  // a first entry: learn the stack it came from, if the worker's
    t_worker_stack_bottom = bottom;
    t_worker_stack_size = size;
  }
}
#else
void asan_start(void**, const Stack*) {}
void asan_finish(void*) {}
#endif

// Leaves the running party (its context goes to *from; fake: its AddressSanitizer fake stack, null
// when it has ended) for `to`, or for the scheduler when `to` is null. Returns when switched back.
void transfer(Block& b, bc::fcontext_t* from, void** fake, Fiber* to) {
  b.current = to;
  if (to) {
    threadIdx = to->index;
    if (!to->context) {
      to->stack = t_stacks.take();
      char* top = to->stack->bottom + to->stack->size - to->stack->colour;
      to->context = bc::make_fcontext(top, to->stack->size - to->stack->colour, fiber_main);
    }
  }
  asan_start(fake, to ? to->stack : b.scheduler_stack);
  const bc::transfer_t t = bc::jump_fcontext(to ? to->context : b.scheduler, from);
  after_switch(b, t);
  asan_finish(fake ? *fake : nullptr);
}

// The first thread to wait in a direct block: it becomes the worker stack's fiber and a scheduler
// fiber takes over the block. Returns when the thread is resumed.
void enter_fiber_mode(Block& b) {
  Fiber& me = *b.current;
  b.direct = false;
  b.on_worker = &me;
  b.scheduler_stack = t_stacks.take();
  char* top = b.scheduler_stack->bottom + b.scheduler_stack->size;
  const bc::fcontext_t scheduler = bc::make_fcontext(top, b.scheduler_stack->size, scheduler_main);
  asan_start(&me.asan_fake_stack, b.scheduler_stack);
  const bc::transfer_t t = bc::jump_fcontext(scheduler, &me.context);
  after_switch(b, t);
  asan_finish(me.asan_fake_stack);
}

// The running fiber waits (its state says for what) until something makes it ready again.
void wait(Block& b) {
  Fiber& me = *b.current;
  if (b.direct)
    enter_fiber_mode(b);
  else
    transfer(b, &me.context, &me.asan_fake_stack, next_ready(b));
  if (b.fault) throw AbandonBlock{};  // only the worker stack's fiber is resumed after a fault
}

[[noreturn]] void leave_for_good(Block& b) {
  Fiber& me = *b.current;
  if (me.state == State::Done) b.ended_on = me.stack;  // else its frames stay: run_block cleans it up
  transfer(b, &me.context, nullptr, b.fault ? nullptr : next_ready(b));
  std::abort();  // an ended fiber is never resumed
}

[[noreturn]] void fail(Block& b, cudaError_t error, const std::string& message) {
  if (!b.fault) b.fault = BlockFault{error, thread_name(*b.current) + ": " + message};
  if (b.direct || b.current == b.on_worker) throw AbandonBlock{};  // unwinds to run_block
  leave_for_good(b);
}

void release_block_barrier(Block& b) {
  const size_t n = b.fibers.size();
  for (size_t k = 0; k < n; ++k) {
    Fiber& f = b.fibers[config().reverse_threads ? n - 1 - k : k];
    if (f.state != State::AtBlockBarrier) continue;
    f.result = uint64_t(b.reduce_accumulator);
    make_ready(b, f);
  }
  b.at_barrier = 0;
}

void thread_exited(Block& b, Fiber& f) {
  f.state = State::Done;
  --b.live;
  Warp& w = b.warps[f.linear / 32];
  w.live &= ~(1u << (f.linear % 32));
  w.exit_epoch[f.linear % 32] = w.epoch;
  if (w.expected & (1u << (f.linear % 32)))
    b.fault = BlockFault{cudaErrorLaunchFailure, thread_name(f) + " exited while the other lanes of its warp wait "
                                                                 "for it in a warp operation whose mask names it"};
  if (b.at_barrier > 0 && b.at_barrier == b.live) release_block_barrier(b);  // exited threads count as arrived
}

void fiber_main(bc::transfer_t t) {
  Block& b = *t_block;
  after_switch(b, t);
  asan_finish(nullptr);
  b.current->state = State::Ready;
  try {
    b.launch->run_thread();
  } catch (const std::exception& e) {
    fail(b, cudaErrorLaunchFailure, std::string("exception in the kernel: ") + e.what());
  } catch (...) {
    fail(b, cudaErrorLaunchFailure, "exception in the kernel");
  }
  thread_exited(b, *b.current);
  leave_for_good(b);
}

// The scheduler of a block in fiber mode: runs ready fibers until the block is over, then returns to
// run_block on the worker stack.
void scheduler_main(bc::transfer_t t) {
  Block& b = *t_block;
  after_switch(b, t);
  asan_finish(nullptr);
  while (b.live > 0 && !b.fault) {
    Fiber* next = next_ready(b);
    if (!next) {
      b.fault = BlockFault{cudaErrorLaunchFailure, describe_deadlock(b)};
      break;
    }
    void* fake = nullptr;
    transfer(b, &b.scheduler, &fake, next);
  }
  const bool worker_ended = b.on_worker->state == State::Done;
  b.current = worker_ended ? nullptr : b.on_worker;
  asan_start(nullptr, nullptr);
  bc::jump_fcontext(worker_ended ? b.worker_return : b.on_worker->context, &b.scheduler);
  std::abort();  // the scheduler is never resumed
}

std::string describe_deadlock(const Block& b) {
  std::string at_barrier, at_warp;
  for (const Fiber& f : b.fibers) {
    if (f.state == State::AtBlockBarrier && at_barrier.empty()) at_barrier = thread_name(f);
    if (f.state == State::AtWarpOperation && at_warp.empty()) at_warp = thread_name(f);
  }
  return "the block can never continue: " + (at_barrier.empty() ? "" : at_barrier + " and others wait at __syncthreads") +
         (at_barrier.empty() || at_warp.empty() ? "" : ", while ") +
         (at_warp.empty() ? "" : at_warp + " and others wait in a warp operation for lanes that are not coming") +
         " (a GPU would hang or run the barriers out of step)";
}

void start_block(Block& b, dim3 dims) {
  const unsigned n = dims.x * dims.y * dims.z;
  b.fibers.resize(n);
  b.warps.resize((n + 31) / 32);
  for (Warp& w : b.warps) {
    w.exists = w.live = w.expected = w.arrived = 0;
    w.op = WarpOp::None;
    w.epoch = 0;
  }
  for (unsigned i = 0; i < n; ++i) {
    b.fibers[i] = Fiber{};
    b.fibers[i].linear = i;
    b.fibers[i].index = uint3{i % dims.x, (i / dims.x) % dims.y, i / (dims.x * dims.y)};
    b.warps[i / 32].exists |= 1u << (i % 32);
  }
  for (Warp& w : b.warps) w.live = w.exists;
  b.live = int(n);
  b.at_barrier = b.reduce_accumulator = 0;
  b.ready.clear();
  b.started = 0;
  b.current = nullptr;
  b.ended_on = nullptr;
  b.direct = true;
  b.on_worker = nullptr;
  b.scheduler_stack = nullptr;
  b.fault.reset();
}

// ---- warp operations ----

// The source lane of a shuffle, by PTX's shfl.sync rules (c carries the segment mask and the clamp).
int source_lane(unsigned lane, const Request& r) {
  const unsigned segmask = (r.c >> 8) & 31u, cval = r.c & 31u, bval = r.b & 31u;
  const unsigned max_lane = (lane & segmask) | (cval & ~segmask), min_lane = lane & segmask;
  int j = int(lane);
  bool in_range = false;
  switch (r.mode) {
    case detail::ShuffleMode::Up: j = int(lane) - int(bval); in_range = j >= int(max_lane); break;
    case detail::ShuffleMode::Down: j = int(lane + bval); in_range = j <= int(max_lane); break;
    case detail::ShuffleMode::Xor: j = int(lane ^ bval); in_range = j <= int(max_lane); break;
    case detail::ShuffleMode::Index: j = int(min_lane | (bval & ~segmask)); in_range = j <= int(max_lane); break;
  }
  return in_range ? j : int(lane);
}

// Every lane of the mask has arrived: each gets its result, the waiting ones become ready.
void complete_warp_operation(Block& b, Warp& w, unsigned warp_index) {
  if (w.op == WarpOp::Collective) {  // the full warp is here (its mask was checked): complete it once
    void* arguments[32];
    for (unsigned l = 0; l < 32; ++l) arguments[l] = w.requests[l].arguments;
    w.requests[0].collective(arguments);
  }
  unsigned ballot = 0;
  ++w.epoch;
  for (unsigned l = 0; l < 32; ++l)
    if ((w.expected >> l & 1u) && w.requests[l].predicate) ballot |= 1u << l;
  for (unsigned k = 0; k < 32; ++k) {
    const unsigned l = config().reverse_threads ? k : 31 - k;  // pushed to the front: the last runs first
    if (!(w.expected >> l & 1u)) continue;
    Fiber& f = b.fibers[warp_index * 32 + l];
    if (w.op == WarpOp::Shuffle) {
      const int src = source_lane(l, w.requests[l]);
      // Reading a lane outside the mask is undefined on a GPU: a value that shows it (all bits set).
      f.result = (w.expected >> src & 1u) ? w.requests[src].bits : ~uint64_t(0);
    } else {
      f.result = ballot;
    }
    f.warp_epoch = w.epoch;
    if (f.state == State::AtWarpOperation) make_ready(b, f, true);
  }
  w.expected = w.arrived = 0;
  w.op = WarpOp::None;
}

uint64_t warp_operation(WarpOp op, unsigned mask, const Request& request, const char* what) {
  Block& b = block_of_caller(what);
  Fiber& me = *b.current;
  const unsigned warp_index = me.linear / 32, lane = me.linear % 32, bit = 1u << lane;
  Warp& w = b.warps[warp_index];
  if (!(mask & bit)) fail(b, cudaErrorLaunchFailure, std::string(what) + " with a mask that leaves out the calling lane");
  if (mask & ~w.exists)
    fail(b, cudaErrorLaunchFailure, std::string(what) + " with a mask naming lanes the block does not have (blockDim " +
                                        std::to_string(b.fibers.size()) + " threads)");
  if (mask & ~w.live) fail(b, cudaErrorLaunchFailure, std::string(what) + " with a mask naming lanes that have exited");
  if (w.arrived == 0) {
    w.expected = mask;
    w.op = op;
  } else if (w.expected != mask || w.op != op ||
             (op == WarpOp::Collective && w.requests[__builtin_ctz(w.arrived)].collective != request.collective)) {
    fail(b, cudaErrorLaunchFailure,
         std::string(what) + ": lanes of the warp are in different warp operations or pass different masks");
  }
  w.requests[lane] = request;
  w.arrived |= bit;
  if (w.arrived == w.expected) {
    complete_warp_operation(b, w, warp_index);
  } else {
    me.state = State::AtWarpOperation;
    wait(b);
  }
  return me.result;
}


// One thread called directly on the worker stack. Returns false once the block has left direct mode
// (this thread waited at some point and has now ended, or the block was abandoned).
bool run_directly(Block& b, Fiber& f) {
  b.current = &f;
  threadIdx = f.index;
  f.state = State::Ready;
  try {
    b.launch->run_thread();
  } catch (const AbandonBlock&) {
    return false;  // the block faulted; its fibers are left where they are
  } catch (const std::exception& e) {
    b.fault = BlockFault{cudaErrorLaunchFailure, thread_name(f) + ": exception in the kernel: " + e.what()};
  } catch (...) {
    b.fault = BlockFault{cudaErrorLaunchFailure, thread_name(f) + ": exception in the kernel"};
  }
  if (b.direct) {
    if (!b.fault) thread_exited(b, f);
    return !b.fault;
  }
  if (!b.fault) thread_exited(b, f);
  // The worker stack's fiber ended: hand over like any fiber, to come back when the block is over.
  transfer(b, &b.worker_return, &b.worker_fake_stack, b.fault ? nullptr : next_ready(b));
  return false;
}

}  // namespace

std::optional<BlockFault> run_block(const KernelLaunch& launch, uint3 index, unsigned char* dynamic_shared) {
  Block& b = t_block_storage;
  b.launch = &launch;
  b.dynamic_shared = dynamic_shared;
  blockIdx = index;
  blockDim = launch.block;
  gridDim = launch.grid;
  t_block = &b;
  start_block(b, launch.block);
  while (Fiber* next = next_ready(b))
    if (!run_directly(b, *next)) break;
  // Fibers left behind by a fault keep frames on their stacks: those stacks are cleaned before reuse.
  for (Fiber& f : b.fibers)
    if (f.stack && f.state != State::Done) {
      f.stack->dirty = true;
      t_stacks.give_back(f.stack);
    }
  if (b.scheduler_stack) {
    b.scheduler_stack->dirty = true;
    t_stacks.give_back(b.scheduler_stack);
  }
  if (b.ended_on) t_stacks.give_back(b.ended_on);
  t_block = nullptr;
  return std::move(b.fault);
}

namespace detail {

void syncthreads() {
  Block& b = block_of_caller("__syncthreads");
  if (b.at_barrier + 1 == b.live) {  // the last to arrive releases the others and goes on
    b.current->result = uint64_t(b.reduce_accumulator);
    release_block_barrier(b);
    return;
  }
  ++b.at_barrier;
  b.current->state = State::AtBlockBarrier;
  wait(b);
}

int syncthreads_reduce(int predicate, int op) {
  Block& b = block_of_caller("__syncthreads_count/and/or");
  if (b.at_barrier == 0) b.reduce_accumulator = op == 1 ? 1 : 0;
  if (op == 0)
    b.reduce_accumulator += predicate != 0;
  else if (op == 1)
    b.reduce_accumulator = b.reduce_accumulator && predicate;
  else
    b.reduce_accumulator = b.reduce_accumulator || predicate;
  Fiber& me = *b.current;
  syncthreads();
  return int(me.result);
}

void syncwarp(unsigned mask) { warp_operation(WarpOp::Syncwarp, mask, Request{}, "__syncwarp"); }

uint64_t shuffle(unsigned mask, uint64_t bits, ShuffleMode mode, unsigned b, unsigned c) {
  Request r;
  r.bits = bits;
  r.mode = mode;
  r.b = b;
  r.c = c;
  return warp_operation(WarpOp::Shuffle, mask, r, "__shfl*_sync");
}

void warp_collective(const char* what, void* arguments, WarpCollective complete) {
  Request r;
  r.arguments = arguments;
  r.collective = complete;
  warp_operation(WarpOp::Collective, 0xffffffffu, r, what);
}

unsigned ballot(unsigned mask, int predicate) {
  Request r;
  r.predicate = predicate != 0;
  return unsigned(warp_operation(WarpOp::Ballot, mask, r, "__ballot_sync/__any_sync/__all_sync"));
}

unsigned activemask() {
  Block& b = block_of_caller("__activemask");
  const Fiber& me = *b.current;
  const Warp& w = b.warps[me.linear / 32];
  unsigned mask = w.live;
  for (unsigned l = 0; l < 32; ++l)
    if ((w.exists & ~w.live) >> l & 1u && w.exit_epoch[l] >= me.warp_epoch) mask |= 1u << l;
  return mask;
}

void* dynamic_shared_memory() { return block_of_caller("dynamic shared memory").dynamic_shared; }

void trap(const char* what) {
  Block& b = block_of_caller("__trap");
  fail(b, cudaErrorLaunchFailure, what);
}

}  // namespace detail
}  // namespace gpusim
