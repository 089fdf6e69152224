#include "pipeline/executor.hpp"

#include <mpi.h>

#include <fmt/format.h>


#include "core/error.hpp"
#include "core/fault_injection.hpp"

namespace trident {

PipelineExecutor::PipelineExecutor(std::vector<GptModel*> chunks, Group* pp, Schedule schedule, Kernels& kernels)
    : chunks_(std::move(chunks)), pp_(pp), schedule_(schedule), k_(kernels) {
  TRIDENT_CHECK(!chunks_.empty(), "a pipeline stage needs at least one chunk");
  stage_ = pp_ ? pp_->rank() : 0;
  pp_size_ = pp_ ? pp_->size() : 1;
  v_ = int(chunks_.size());
  last_chunk_ = pp_size_ * v_ - 1;
  boundary_ = chunks_[0]->boundary_size();
  inputs_.resize(chunks_[0]->positions());
  targets_.resize(chunks_[0]->positions());
  origin_ = MPI_Wtime();
  // Failure tests: TRIDENT_INJECT_FAULT=pipeline-stage:N makes stage N fail in the middle of its first
  // backward pass, while the other stages wait on it (core/fault_injection.hpp).
  if (const auto stage = fault::armed_number(fault::kPipelineStage)) fault_stage_ = *stage;
}

PipelineExecutor::~PipelineExecutor() {
  for (float* b : all_buffers_) k_.free(b);
}

float* PipelineExecutor::take_buffer() {
  if (free_buffers_.empty()) {
    all_buffers_.push_back(k_.alloc(boundary_));
    return all_buffers_.back();
  }
  float* b = free_buffers_.back();
  free_buffers_.pop_back();
  return b;
}

void PipelineExecutor::give_buffer(float* b) { free_buffers_.push_back(b); }

void PipelineExecutor::record(const std::string& name, double start) {
  if (tracing_) trace_.push_back({name, (start - origin_) * 1e6, (MPI_Wtime() - start) * 1e6});
}

namespace {
std::string op_name(const PipeOp& op) {
  return fmt::format("{}{}.{}", op.forward ? 'F' : 'B', op.chunk, op.micro_batch);
}
}  // namespace

bool PipelineExecutor::needs_input(const PipeOp& op) const {
  const int g = global_chunk(op.chunk);
  return op.forward ? g != 0 : g != last_chunk_;
}

void PipelineExecutor::post_recv(const PipeOp& op) {
  const Key key{op.forward, op.chunk, op.micro_batch};
  if (!needs_input(op) || recvs_.count(key)) return;
  const int g = global_chunk(op.chunk);
  const int source = op.forward ? (g - 1) % pp_size_ : (g + 1) % pp_size_;
  float* buf = take_buffer();
  recvs_[key] = {pp_->irecv(buf, boundary_, source, 2 * g + (op.forward ? 0 : 1)), buf};
}

const float* PipelineExecutor::wait_recv(const PipeOp& op) {
  post_recv(op);
  auto& [req, buf] = recvs_.at({op.forward, op.chunk, op.micro_batch});
  const double start = MPI_Wtime();
  pp_->wait(req);
  last_wait_s_ += MPI_Wtime() - start;
  record("recv " + op_name(op), start);
  return buf;
}

void PipelineExecutor::run(const std::vector<PipeOp>& ops, const Fetch& fetch, float dloss_scale, bool with_grad) {
  std::map<Key, int> slots;  // (chunk, micro-batch) -> activation slot, from forward to backward
  int alive = 0;
  last_wait_s_ = 0;
  last_peak_ = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const PipeOp& op = ops[i];
    const Key fwd_key{true, op.chunk, op.micro_batch};
    const int g = global_chunk(op.chunk);
    GptModel& chunk = *chunks_[op.chunk];
    // Receives with the same source and tag match in posting order: this op's before the next one's,
    // which is posted now so that its transfer overlaps this op's computation.
    if (pp_size_ > 1) {
      post_recv(op);
      if (i + 1 < ops.size()) post_recv(ops[i + 1]);
    }
    const double start = MPI_Wtime();
    if (op.forward) {
      const float* input = needs_input(op) ? wait_recv(op) : nullptr;
      if (g == 0 || g == last_chunk_) fetch(op.micro_batch, inputs_.data(), targets_.data());
      const int slot = chunk.forward(inputs_.data(), input, targets_.data(), dloss_scale, with_grad);
      if (input) give_buffer(recvs_.at(fwd_key).second), recvs_.erase(fwd_key);
      if (g != last_chunk_) {
        const double send_start = MPI_Wtime();
        forward_sends_[fwd_key] = pp_->isend(chunk.output(slot), boundary_, (g + 1) % pp_size_, 2 * (g + 1));
        record("send " + op_name(op), send_start);
      }
      if (with_grad) {
        slots[fwd_key] = slot;
      } else {
        if (g != last_chunk_) pp_->wait(forward_sends_.at(fwd_key)), forward_sends_.erase(fwd_key);
        chunk.release(slot);
      }
      last_peak_ = std::max(last_peak_, ++alive);
    } else {
      const Key bwd_key{false, op.chunk, op.micro_batch};
      if (stage_ == fault_stage_)
        throw Error(fmt::format("pipeline stage {} failed in the backward of micro-batch {} (injected by "
                                "TRIDENT_INJECT_FAULT)",
                                stage_, op.micro_batch));
      const float* dout = needs_input(op) ? wait_recv(op) : nullptr;
      if (auto it = forward_sends_.find(fwd_key); it != forward_sends_.end()) pp_->wait(it->second), forward_sends_.erase(it);
      const float* dinput = chunk.backward(slots.at(fwd_key), dout);
      slots.erase(fwd_key);
      if (dout) give_buffer(recvs_.at(bwd_key).second), recvs_.erase(bwd_key);
      if (g != 0) {  // the chunk's input gradient goes back; copy it, the model reuses its buffer
        const double send_start = MPI_Wtime();
        float* buf = take_buffer();
        k_.copy(buf, dinput, boundary_);
        grad_sends_.push_back({pp_->isend(buf, boundary_, (g - 1) % pp_size_, 2 * (g - 1) + 1), buf});
        record("send " + op_name(op), send_start);
      }
      --alive;
    }
    record(op_name(op), start);
  }
  for (auto& [req, buf] : grad_sends_) pp_->wait(req), give_buffer(buf);
  grad_sends_.clear();
  TRIDENT_CHECK(recvs_.empty() && forward_sends_.empty() && slots.empty(),
                "pipeline step ended with {} receives, {} sends and {} micro-batches outstanding", recvs_.size(),
                forward_sends_.size(), slots.size());
}

// The loss was summed in backend memory by the chunk holding the head: one copy to the host per step.
double PipelineExecutor::take_loss_sum() {
  double loss = 0;
  for (GptModel* c : chunks_)
    if (c->layout().has_head()) loss += c->take_loss_sum();
  return loss;
}

void PipelineExecutor::train(int m, const Fetch& fetch, float dloss_scale) {
  run(build_schedule(schedule_, pp_size_, stage_, v_, m), fetch, dloss_scale, true);
}

double PipelineExecutor::evaluate(int m, const Fetch& fetch) {
  run(forward_only_schedule(pp_size_, v_, m), fetch, 0.f, false);
  return take_loss_sum();
}

}  // namespace trident
