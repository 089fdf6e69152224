#pragma once
// Pipeline schedules as the ordered list of forward/backward operations one stage runs in a step.
//   gpipe        all m forwards, then all m backwards;
//   1f1b         min(pp - stage - 1, m) warm-up forwards, then one forward / one backward, then the
//                remaining backwards: at most pp - stage micro-batches alive on a stage;
//   interleaved  1F1B over v chunks per stage (Megatron-LM's order): forward k runs chunk
//                (k / pp) % v on micro-batch (k / (pp*v))*pp + k % pp, backward k the chunks in
//                reverse; warm-up (pp - stage - 1)*2 + (v - 1)*pp, or all forwards first when m == pp.
#include <string>
#include <vector>

#include "core/config.hpp"

namespace trident {

struct PipeOp {
  bool forward = true;
  int chunk = 0;        // local chunk on this stage, 0..v-1
  int micro_batch = 0;
  bool operator==(const PipeOp& o) const {
    return forward == o.forward && chunk == o.chunk && micro_batch == o.micro_batch;
  }
};

std::vector<PipeOp> build_schedule(Schedule schedule, int pp, int stage, int v, int m);

// Forward passes only (validation): every chunk's forward of every micro-batch, in pipeline order.
std::vector<PipeOp> forward_only_schedule(int pp, int v, int m);

// Most micro-batches (per chunk summed) whose activations are alive at once when running `ops`.
int peak_in_flight(const std::vector<PipeOp>& ops);

// "F0.3 B0.3 ..." (F/B, chunk, micro-batch) for messages and tests.
std::string describe(const std::vector<PipeOp>& ops);

}  // namespace trident
