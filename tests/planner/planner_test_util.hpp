#pragma once
// Workloads of the planner tests, built directly (independent of the deck parser).
#include "core/config.hpp"

namespace trident::planner::test {

// GPT-3 175B as in the seeds / Narayanan et al. 2021: 96 layers, hidden 12288, 96 heads, seq 2048,
// vocab 51200, bf16, global batch 1536; deck layout tp 8 x pp 16 x dp 8.
inline Config gpt3_175b() {
  Config c;
  c.source = "gpt3-175b (test)";
  c.model.vocab_size = 51200;
  c.model.seq_len = 2048;
  c.model.layers = 96;
  c.model.hidden = 12288;
  c.model.heads = 96;
  c.model.ffn_hidden = 4 * 12288;
  c.mesh.tp = 8;
  c.mesh.pp = 16;
  c.mesh.dp = 8;
  c.train.micro_batch = 1;
  c.train.global_batch = 1536;
  c.train.precision = Precision::BF16;
  c.runtime.backend = Backend::Cuda;
  return c;
}

// The 1T model of the seeds / Narayanan et al. 2021: 128 layers, hidden 25600, 160 heads, on 4096 GPUs.
inline Config gpt_1t() {
  Config c = gpt3_175b();
  c.source = "gpt-1t (test)";
  c.model.layers = 128;
  c.model.hidden = 25600;
  c.model.heads = 160;
  c.model.ffn_hidden = 4 * 25600;
  c.mesh.tp = 8;
  c.mesh.pp = 64;
  c.mesh.dp = 8;
  c.train.global_batch = 3072;
  return c;
}

// The calibration workload on this machine: GPT-2 124M shape at seq 64 (issue 3's benchmark shape),
// global batch 8, micro-batch 2, fp32 on the cpu backend.
inline Config gpt2_small_calibration() {
  Config c;
  c.source = "gpt2-124m seq 64 (test)";
  c.model.vocab_size = 50257;
  c.model.seq_len = 64;
  c.model.layers = 12;
  c.model.hidden = 768;
  c.model.heads = 12;
  c.model.ffn_hidden = 3072;
  c.train.micro_batch = 2;
  c.train.global_batch = 8;
  c.train.precision = Precision::FP32;
  c.runtime.backend = Backend::Cpu;
  return c;
}

}  // namespace trident::planner::test
