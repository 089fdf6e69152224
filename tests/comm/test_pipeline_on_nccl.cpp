// Point-to-point over NCCL, checked without a GPU (comm/nccl.hpp): a simulation of a whole pipeline step on NCCL's semantics, for every schedule at pp 2 to 8: each
//     stage posts and waits exactly as PipelineExecutor::run does (a model of src/pipeline/executor.cpp,
//     kept in this file); the host never blocks (waits are stream waits); a stream runs one NCCL call
//     (or group) at a time, which starts once the compute queued before it is done and ends when all
//     its transfers have met their partners; NCCL pairs the sends and receives of two ranks by order,
//     ignoring tags. With a stream per peer and direction (the transport's channels) the step must
//     finish, and every receive must meet the very message the MPI tags would have given it (the same
//     chunk, micro-batch and direction), or data would be silently swapped. With one stream for all
//     transfers it must deadlock somewhere (issued each at once, or held and issued together at the next
//     send or wait), which shows the simulation can fail.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pipeline/schedule.hpp"

namespace trident::test {
namespace {

// ---- the pipeline step on NCCL semantics ----

struct Message {  // what the MPI tags identify: the receiving chunk and micro-batch, and the direction
  int global_chunk, micro_batch;
  bool forward;
  bool operator==(const Message& o) const {
    return global_chunk == o.global_chunk && micro_batch == o.micro_batch && forward == o.forward;
  }
};

struct Op {  // a transfer as the simulation tracks it
  bool send;
  int peer;
  int sequence;  // its place among the transfers between this rank and peer in its direction
  Message message;
  bool active = false, done = false;
};

struct Group {
  size_t compute_before;  // compute-stream items that must be done before the group starts
  std::vector<int> ops;   // indices into Stage::ops
  bool started = false;
};

struct Stage {
  std::vector<Op> ops;
  std::vector<int> held;  // OneStreamHeld: transfers not issued yet, in posting order
  std::map<std::pair<bool, int>, std::deque<Group>> streams;  // communication streams
  std::vector<int> compute;       // compute stream: -1 a kernel, else "wait for transfer i"
  size_t compute_done = 0;
  std::map<int, int> sent, received;  // per peer: transfers so far
};

// How transfers are issued: on the transport's channels (one stream per peer and direction, each
// transfer at once); or on one stream, each at once, or held until a send (which goes out with all that
// is held) or a wait (which issues what is held up to its transfer), as NCCL group calls.
enum class Issue { Channels, OneStream, OneStreamHeld };

class PipelineSimulation {
 public:
  PipelineSimulation(Schedule schedule, int pp, int v, int m, bool with_grad, Issue issue)
      : pp_(pp), v_(v), issue_(issue), stages_(pp) {
    for (int s = 0; s < pp; ++s) {
      const auto ops = with_grad ? build_schedule(schedule, pp, s, v, m) : forward_only_schedule(pp, v, m);
      run_executor(s, ops, with_grad);
    }
  }

  // Runs the devices until nothing moves; "" when every stream drained, else what is stuck.
  std::string run() {
    for (bool moved = true; moved;) {
      moved = false;
      for (int s = 0; s < pp_; ++s) moved |= advance(s);
    }
    for (int s = 0; s < pp_; ++s) {
      const Stage& st = stages_[size_t(s)];
      size_t groups = 0;
      for (const auto& [channel, comm] : st.streams) groups += comm.size();
      if (groups > 0 || st.compute_done < st.compute.size()) {
        std::string what;
        for (int r = 0; r < pp_; ++r) {
          const Stage& x = stages_[size_t(r)];
          what += fmt::format("\n stage {}: compute {}/{} (head waits {})", r, x.compute_done, x.compute.size(),
                              x.compute_done < x.compute.size() ? x.compute[x.compute_done] : -2);
          for (const auto& [channel, comm] : x.streams) {
            if (comm.empty()) continue;
            what += fmt::format(", head group (started {}, after compute {}):", comm.front().started,
                                comm.front().compute_before);
            for (int i : comm.front().ops) {
              const Op& o = x.ops[size_t(i)];
              what += fmt::format(" [{} {} peer {} seq {} g{} mb{} {} {}]", i, o.send ? "send" : "recv", o.peer,
                                  o.sequence, o.message.global_chunk, o.message.micro_batch,
                                  o.message.forward ? "F" : "B", o.done ? "done" : "");
            }
          }
        }
        return fmt::format("deadlock: stage {} has {} NCCL groups and {} compute items left{}", s, groups,
                           st.compute.size() - st.compute_done, what);
      }
    }
    return mismatch_;
  }

 private:
  int global(int stage, int chunk) const { return chunk * pp_ + stage; }
  bool needs_input(int stage, const PipeOp& op) const {
    const int g = global(stage, op.chunk);
    return op.forward ? g != 0 : g != pp_ * v_ - 1;
  }

  int post(int s, bool is_send, int peer, Message msg) {
    Stage& st = stages_[size_t(s)];
    const int seq = is_send ? st.sent[peer]++ : st.received[peer]++;
    st.ops.push_back(Op{is_send, peer, seq, msg});
    const int slot = int(st.ops.size()) - 1;
    if (issue_ != Issue::OneStreamHeld) {
      issue(s, {slot});
    } else {
      st.held.push_back(slot);
      if (is_send) issue(s, std::exchange(st.held, {}));
    }
    return slot;
  }
  void wait(int s, int slot) {
    Stage& st = stages_[size_t(s)];
    const auto it = std::find(st.held.begin(), st.held.end(), slot);
    if (it != st.held.end()) {
      issue(s, std::vector<int>(st.held.begin(), it + 1));
      st.held.erase(st.held.begin(), it + 1);
    }
    st.compute.push_back(slot);
  }
  void issue(int s, const std::vector<int>& group) {
    if (group.empty()) return;
    Stage& st = stages_[size_t(s)];
    const Group g{st.compute.size(), group};
    const Op& first = st.ops[size_t(group.front())];
    const auto channel = issue_ == Issue::Channels ? std::make_pair(first.send, first.peer) : std::make_pair(false, -1);
    st.streams[channel].push_back(g);
  }

  // The posts and waits of PipelineExecutor::run, in its order.
  void run_executor(int s, const std::vector<PipeOp>& ops, bool with_grad) {
    Stage& st = stages_[size_t(s)];
    const int last = pp_ * v_ - 1;
    std::map<std::tuple<bool, int, int>, int> recvs, forward_sends;
    std::vector<int> grad_sends;
    auto post_recv = [&](const PipeOp& op) {
      const auto key = std::make_tuple(op.forward, op.chunk, op.micro_batch);
      if (!needs_input(s, op) || recvs.count(key)) return;
      const int g = global(s, op.chunk);
      const int source = op.forward ? (g - 1) % pp_ : (g + 1) % pp_;
      recvs[key] = post(s, false, source, Message{g, op.micro_batch, op.forward});
    };
    for (size_t i = 0; i < ops.size(); ++i) {
      const PipeOp& op = ops[i];
      const int g = global(s, op.chunk);
      const auto fwd_key = std::make_tuple(true, op.chunk, op.micro_batch);
      if (pp_ > 1) {
        post_recv(op);
        if (i + 1 < ops.size()) post_recv(ops[i + 1]);
      }
      if (needs_input(s, op)) wait(s, recvs.at(std::make_tuple(op.forward, op.chunk, op.micro_batch)));
      if (op.forward) {
        st.compute.push_back(-1);
        if (g != last) {
          forward_sends[fwd_key] = post(s, true, (g + 1) % pp_, Message{g + 1, op.micro_batch, true});
          if (!with_grad) wait(s, forward_sends[fwd_key]);
        }
      } else {
        if (auto it = forward_sends.find(fwd_key); it != forward_sends.end()) wait(s, it->second);
        st.compute.push_back(-1);
        if (g != 0) grad_sends.push_back(post(s, true, (g - 1) % pp_, Message{g - 1, op.micro_batch, false}));
      }
    }
    for (int slot : grad_sends) wait(s, slot);
  }

  bool advance(int s) {
    Stage& st = stages_[size_t(s)];
    bool moved = false;
    while (st.compute_done < st.compute.size()) {  // kernels run; a wait holds the stream
      const int w = st.compute[st.compute_done];
      if (w >= 0 && !st.ops[size_t(w)].done) break;
      ++st.compute_done;
      moved = true;
    }
    for (auto& [channel, comm] : st.streams) {
      while (!comm.empty()) {
        Group& g = comm.front();
        if (!g.started) {
          if (st.compute_done < g.compute_before) break;
          g.started = true;
          for (int i : g.ops) st.ops[size_t(i)].active = true;
          moved = true;
        }
        for (int i : g.ops) moved |= try_match(s, i);
        bool all_done = true;
        for (int i : g.ops) all_done &= st.ops[size_t(i)].done;
        if (!all_done) break;
        comm.pop_front();
        moved = true;
      }
    }
    return moved;
  }

  bool try_match(int s, int i) {
    Op& a = stages_[size_t(s)].ops[size_t(i)];
    if (a.done || !a.active) return false;
    for (Op& b : stages_[size_t(a.peer)].ops) {
      if (b.send == a.send || b.peer != s || b.sequence != a.sequence) continue;
      if (!b.active) return false;
      if (!(a.message == b.message) && mismatch_.empty())
        mismatch_ = fmt::format("stage {} {} chunk {} micro-batch {} ({}) paired by NCCL's order with chunk {} "
                                "micro-batch {} ({}) of stage {}",
                                s, a.send ? "sends" : "receives", a.message.global_chunk, a.message.micro_batch,
                                a.message.forward ? "activation" : "gradient", b.message.global_chunk,
                                b.message.micro_batch, b.message.forward ? "activation" : "gradient", a.peer);
      a.done = b.done = true;
      return true;
    }
    return false;
  }

  int pp_, v_;
  Issue issue_;
  std::vector<Stage> stages_;
  std::string mismatch_;
};

struct Case {
  Schedule schedule;
  int pp, v, m;
  bool with_grad;
};

std::vector<Case> every_case() {
  std::vector<Case> cases;
  for (int pp : {2, 3, 4, 8})
    for (int m : {1, 2, 3, 4, 8, 16})
      for (const auto& [schedule, v] : {std::pair{Schedule::GPipe, 1}, std::pair{Schedule::OneFOneB, 1},
                                        std::pair{Schedule::Interleaved, 2}, std::pair{Schedule::Interleaved, 3}}) {
        if (schedule == Schedule::Interleaved && m % pp != 0) continue;  // the deck refuses it
        for (bool with_grad : {true, false}) cases.push_back(Case{schedule, pp, v, m, with_grad});
      }
  return cases;
}

std::string name(const Case& c) {
  return fmt::format("{} pp {} v {} m {}{}", to_string(c.schedule), c.pp, c.v, c.m, c.with_grad ? "" : " (forward only)");
}

TEST(PipelineOnNccl, EveryScheduleRunsOnChannelsWithoutDeadlockOrSwappedMessages) {
  const auto cases = every_case();
  for (const Case& c : cases) {
    SCOPED_TRACE(name(c));
    EXPECT_EQ(PipelineSimulation(c.schedule, c.pp, c.v, c.m, c.with_grad, Issue::Channels).run(), "");
  }
  EXPECT_GT(cases.size(), 100u);
}

// One stream for every transfer deadlocks: sent each at once, already 1F1B at pp 2 (both stages reach a
// send whose partner's receive waits behind the partner's own send); held and grouped, the interleaved
// schedule once m > pp.
TEST(PipelineOnNccl, OneStreamForEveryTransferDeadlocks) {
  int each_at_once = 0, held = 0;
  for (const Case& c : every_case()) {
    const std::string one = PipelineSimulation(c.schedule, c.pp, c.v, c.m, c.with_grad, Issue::OneStream).run();
    const std::string two = PipelineSimulation(c.schedule, c.pp, c.v, c.m, c.with_grad, Issue::OneStreamHeld).run();
    each_at_once += one.rfind("deadlock", 0) == 0;
    held += two.rfind("deadlock", 0) == 0;
  }
  EXPECT_GT(each_at_once, 0);
  EXPECT_GT(held, 0);
  EXPECT_THAT(PipelineSimulation(Schedule::Interleaved, 2, 2, 4, true, Issue::OneStreamHeld).run(),
              ::testing::StartsWith("deadlock"));
  EXPECT_THAT(PipelineSimulation(Schedule::OneFOneB, 2, 1, 4, true, Issue::OneStream).run(),
              ::testing::StartsWith("deadlock"));
}

}  // namespace
}  // namespace trident::test
