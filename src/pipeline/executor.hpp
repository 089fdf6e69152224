#pragma once
// Runs a step's pipeline schedule on this stage: forward/backward of each (chunk, micro-batch) in
// schedule order, boundary activations to the next stage and their gradients to the previous one
// with non-blocking point-to-point messages. The receive of the next operation's input is posted
// before the current operation computes, so transfers overlap computation; sends never block.
// Messages between two stages are told apart by tag 2*g + direction (g: the receiving chunk's
// global index) and arrive in order, since every schedule runs a chunk's micro-batches in order.
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "comm/group.hpp"
#include "model/gpt.hpp"
#include "pipeline/schedule.hpp"

namespace trident {

// One operation's interval on this rank's timeline (microseconds since the run started).
struct TraceEvent {
  // "Fc.mb", "Bc.mb": an operation; "recv Fc.mb": waiting for its input to arrive (forward: the
  // previous stage's activation; backward: the next stage's gradient); "send Fc.mb": posting its
  // output to the next (forward) or previous (backward) stage. c is the local chunk, mb the micro-batch.
  std::string name;
  double start_us = 0;
  double duration_us = 0;
};

class PipelineExecutor {
 public:
  // `chunks[c]` is local chunk c (global chunk c*pp + stage). `pp` is the pipeline group (null or
  // size 1 for no pipelining).
  PipelineExecutor(std::vector<GptModel*> chunks, Group* pp, Schedule schedule, Kernels& kernels);
  ~PipelineExecutor();

  // Fills the host inputs and targets (B*T each) of micro-batch mb.
  using Fetch = std::function<void(int64_t mb, int32_t* inputs, int32_t* targets)>;

  // One training step over m micro-batches: the stage's schedule, gradients accumulated into the
  // chunks; the loss stays in backend memory, the step does not wait for it (take_loss_sum).
  void train(int m, const Fetch& fetch, float dloss_scale);
  // The sum of the per-position losses since the last take (non-zero on the last stage only); waits
  // for the queued work.
  double take_loss_sum();
  // Forward passes only (validation); returns the loss sum on the last stage.
  double evaluate(int m, const Fetch& fetch);

  // Seconds this rank waited for boundary messages during the last train() / in total.
  double last_wait_s() const { return last_wait_s_; }
  const std::vector<TraceEvent>& trace() const { return trace_; }
  void set_tracing(bool on) { tracing_ = on; }
  // Most micro-batches alive at once on this stage during the last train().
  int last_peak_in_flight() const { return last_peak_; }
  // Bytes of the boundary send/receive buffers allocated so far (they are reused across steps).
  int64_t buffer_bytes() const { return int64_t(all_buffers_.size()) * boundary_ * int64_t(sizeof(float)); }

 private:
  using Key = std::tuple<bool, int, int>;  // forward?, chunk, micro-batch
  void run(const std::vector<PipeOp>& ops, const Fetch& fetch, float dloss_scale, bool with_grad);
  int global_chunk(int local) const { return local * pp_size_ + stage_; }
  bool needs_input(const PipeOp& op) const;
  void post_recv(const PipeOp& op);
  const float* wait_recv(const PipeOp& op);
  float* take_buffer();
  void give_buffer(float* b);
  void record(const std::string& name, double start);

  std::vector<GptModel*> chunks_;
  Group* pp_;
  Schedule schedule_;
  Kernels& k_;
  int stage_ = 0, pp_size_ = 1, v_ = 1, last_chunk_ = 0;
  int64_t boundary_ = 0;
  std::vector<float*> free_buffers_, all_buffers_;
  std::map<Key, std::pair<Request, float*>> recvs_;
  std::map<Key, Request> forward_sends_;             // until the micro-batch's backward
  std::vector<std::pair<Request, float*>> grad_sends_;  // until the end of the step
  std::vector<int32_t> inputs_, targets_;
  bool tracing_ = false;
  double origin_ = 0, last_wait_s_ = 0;
  int last_peak_ = 0;
  int fault_stage_ = -1;
  std::vector<TraceEvent> trace_;
};

}  // namespace trident
