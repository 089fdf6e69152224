#include "planner/time_model.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "model/flops.hpp"

namespace trident::planner {

double pipeline_bubble_fraction(Schedule schedule, int pp, int64_t m, int v) {
  if (pp <= 1 || m <= 0) return 0.0;
  const int vv = schedule == Schedule::Interleaved ? std::max(1, v) : 1;
  return double(pp - 1) / (double(vv) * double(m));
}

namespace {
double transfer(double bytes, const LinkSpec& link) { return bytes / (link.bandwidth_gbs * 1e9); }
double latency(const LinkSpec& link) { return link.latency_us * 1e-6; }
}  // namespace

double allreduce_seconds(double bytes, int n, const LinkSpec& link) {
  if (n <= 1 || bytes <= 0) return 0.0;
  return 2.0 * (n - 1) / n * transfer(bytes, link) + 2.0 * (n - 1) * latency(link);
}

double allgather_seconds(double bytes, int n, const LinkSpec& link) {
  if (n <= 1 || bytes <= 0) return 0.0;
  return double(n - 1) / n * transfer(bytes, link) + double(n - 1) * latency(link);
}

double reduce_scatter_seconds(double bytes, int n, const LinkSpec& link) { return allgather_seconds(bytes, n, link); }

double p2p_seconds(double bytes, const LinkSpec& link) { return latency(link) + transfer(bytes, link); }

double gemm_rate(const ClusterSpec& c, const TrainConfig& train, double gemm_flops) {
  // bf16 GEMMs (train.precision or train.matmul_precision) run at the bf16 tensor-core peak, TF32 at
  // half of it (dense TF32 is half of dense bf16 on A100, H100 and H200), exact fp32 at the fp32 peak.
  // On a cluster without a bf16 peak (the cpu preset) rounded operands go through the fp32 GEMM, as on
  // trident's CPU backend.
  const bool bf16 = train.gemm_precision() == MatmulPrecision::BF16;
  const bool tf32 = train.gemm_precision() == MatmulPrecision::TF32;
  const bool tensor_cores = (bf16 || tf32) && c.peak_tflops_bf16 > 0;
  const double peak = tensor_cores ? c.peak_tflops_bf16 * (tf32 ? 0.5 : 1.0) : c.peak_tflops_fp32;
  if (peak <= 0)
    throw Error(fmt::format("cluster '{}' has no {} peak (peak_tflops_{} = 0) but the deck's GEMMs are {}", c.name,
                            tensor_cores ? "bf16" : "fp32", tensor_cores ? "bf16" : "fp32",
                            bf16 ? "bf16" : tf32 ? "tf32" : "fp32"));
  const double half = c.gemm_half_gflop * 1e9;
  const double size_factor = half > 0 ? gemm_flops / (gemm_flops + half) : 1.0;
  return peak * 1e12 * c.gemm_efficiency * size_factor;
}

TimeBreakdown estimate_time(const Config& cfg, const ClusterSpec& cluster, const Layout& l, const Placement& placement,
                            const MemoryEstimate& memory) {
  const auto& m = cfg.model;
  const StorageBytes bytes = storage_bytes(cfg.train.precision);
  const double e = bytes.communicated;  // a communicated activation, gradient or parameter element
  const double C = double(m.hidden), s = double(m.seq_len), b = double(l.micro_batch);
  const double T = b * s;               // tokens per micro-batch
  const double Vp = double(padded_vocab(m, l.tp));
  const double t = l.tp;
  const int v = l.schedule == Schedule::Interleaved ? std::max(1, l.virtual_stages) : 1;
  const int64_t mb = micro_batches(cfg, l);
  const double slow = 1.0 / placement.share;  // oversubscribed ranks share a device
  const LinkSpec& tp_link = placement.tp_intra ? cluster.intra_node : cluster.inter_node;
  const LinkSpec& pp_link = placement.pp_intra ? cluster.intra_node : cluster.inter_node;
  const LinkSpec& dp_link = placement.dp_intra ? cluster.intra_node : cluster.inter_node;

  // The smallest of a layer's four GEMMs on one rank (the attention output projection) sets the rate.
  const double rate = gemm_rate(cluster, cfg.train, 2 * T * C * C / t) * placement.share;
  const double mem_bw = cluster.memory_bandwidth_gbs * 1e9 * placement.share;

  ActivationShape shape;
  shape.seq = s;
  shape.micro_batch = b;
  shape.hidden = C;
  shape.heads = double(m.heads);
  shape.ffn = double(ffn_hidden_of(m));
  shape.kv_hidden = double(m.head_dim() * m.kv());
  shape.swiglu = m.mlp == Mlp::SwiGlu;
  shape.tp = l.tp;
  shape.sequence_parallel = l.sequence_parallel;
  shape.elem_bytes = bytes.saved_activation;
  shape.residual_bytes = bytes.residual;
  shape.dropout = kTridentDropout;
  const double act_full = layer_activation_bytes(shape, Recompute::None);

  const double layer_fwd = layer_forward_flops(m, T) / t;
  const double attn_core = 2 * T * s * C / t;  // what selective recompute repeats (causal: model/flops.hpp)
  const double M = e * T * C;                   // one activation tensor [b, s, h]

  TimeBreakdown tb;
  tb.micro_batches = mb;
  tb.oversubscription = slow;
  for (int i = 0; i < l.pp; ++i) {
    const StageMemory& sm = memory.stages.at(i);
    const double n = double(sm.layers);
    const bool last = i == l.pp - 1;
    StageTime st;
    double fwd_flops = n * layer_fwd + (last ? 2 * T * C * Vp / t : 0.0);
    st.forward = fwd_flops / rate;
    st.backward = 2 * fwd_flops / rate;
    if (l.recompute == Recompute::Full) st.recompute = n * layer_fwd / rate;
    if (l.recompute == Recompute::Selective) st.recompute = n * attn_core / rate;
    // Memory-bound kernels: each saved tensor written in forward, read in backward, its gradient written
    // (3 passes over the layer's activations; a 4th when the whole layer is recomputed); the logits too.
    double passes = 3.0 + (l.recompute == Recompute::Full ? 1.0 : 0.0);
    double bytes = n * passes * act_full;
    if (l.recompute == Recompute::Selective) bytes += n * attention_score_bytes(shape);
    if (last) bytes += 3.0 * 4.0 * T * Vp / t;
    // A bf16 working copy (below ZeRO-3) widens each segment to fp32 before forward and again before
    // backward (model/bf16_working_copy.hpp): 2 bytes read and 4 written a parameter, twice.
    if (cfg.train.bf16_working_copy() && !(l.dp > 1 && l.zero >= 3)) bytes += 2.0 * 6.0 * sm.params;
    st.elementwise = bytes / mem_bw;
    if (l.tp > 1) {
      // Per layer: 2 all-reduces in forward and 2 in backward (Megatron, Shoeybi et al. 2019); with
      // sequence parallelism each becomes an all-gather + reduce-scatter of the same volume (Korthikanti
      // Sec. 4.2.2); full recompute repeats the forward's 2.
      const double k = 4.0 + (l.recompute == Recompute::Full ? 2.0 : 0.0);
      const double one = l.sequence_parallel ? allgather_seconds(M, l.tp, tp_link) + reduce_scatter_seconds(M, l.tp, tp_link)
                                             : allreduce_seconds(M, l.tp, tp_link);
      st.tp_comm = n * k * one;
      if (i == 0) st.tp_comm += allreduce_seconds(M, l.tp, tp_link);  // vocab-parallel embedding
      if (last)  // LM-head input gradient + the vocab-parallel cross-entropy's max, sum-exp, target logit
        st.tp_comm += allreduce_seconds(M, l.tp, tp_link) + 3 * allreduce_seconds(4 * T, l.tp, tp_link);
      st.tp_comm *= slow;
    }
    if (l.pp > 1) st.pp_p2p = 2.0 * v * p2p_seconds(M, pp_link) * slow;  // activation forward, gradient back
    if (l.dp > 1 && l.zero >= 2) {
      // ZeRO-2 keeps only its gradient shard, so with gradient accumulation every micro-batch's gradients
      // are reduce-scattered as its backward produces them (as DeepSpeed's stage 2 does), overlapped with
      // that backward except for the last bucket.
      const double g = sm.params * e;
      const double rs = reduce_scatter_seconds(g, l.dp, dp_link) * slow;
      const double lb = reduce_scatter_seconds(std::min(g, cfg.mesh.bucket_mb * kMiB), l.dp, dp_link) * slow;
      st.dp_comm = std::max(lb, rs - (st.backward + st.recompute));
      if (l.zero >= 3) {
        // ZeRO-3 gathers the parameters before forward and again before backward, each layer's
        // prefetched while the previous one computes: only what outlasts the compute shows.
        // (bf16: the partitions are fp32 masters and the gathers move their bf16 rounding)
        const double p = sm.params * (cfg.train.bf16_working_copy() ? 2.0 : e);
        const double ag = 2.0 * allgather_seconds(p, l.dp, dp_link) * slow;
        const double first = allgather_seconds(p / std::max<double>(1.0, double(m.layers)), l.dp, dp_link) * slow;
        st.dp_comm += std::max(first, ag - (st.forward + st.backward + st.recompute));
      }
    }
    tb.stages.push_back(st);
  }
  for (int i = 1; i < l.pp; ++i)
    if (tb.stages[i].total() > tb.stages[tb.critical_stage].total()) tb.critical_stage = i;
  const StageTime& crit = tb.stages[tb.critical_stage];
  tb.per_microbatch = crit.total();
  tb.compute_forward = mb * crit.forward;
  tb.compute_backward = mb * crit.backward;
  tb.compute_recompute = mb * crit.recompute;
  tb.elementwise = mb * crit.elementwise;
  tb.tp_comm = mb * crit.tp_comm;
  tb.pp_p2p = mb * crit.pp_p2p;
  tb.dp_in_clock = mb * crit.dp_comm;
  tb.bubble_fraction = pipeline_bubble_fraction(l.schedule, l.pp, mb, v);
  const double ideal = mb * tb.per_microbatch;
  tb.pp_bubble = tb.bubble_fraction * ideal;

  // After the pipeline flush. Stage i finishes its last backward about sum_{j<i} backward_j earlier than
  // stage 0 (the cool-down runs from the last stage to the first), which hides part of its DP work.
  // mesh.grad_reduce_dtype = "bf16" reduces 2-byte gradients; a bf16 working copy's ranges are
  // broadcast as bf16 (its values are bf16 values).
  const bool bf16_reduce = cfg.mesh.grad_reduce_dtype == Precision::BF16;
  const bool bf16_params = cfg.train.bf16_working_copy();
  const double grad_bytes = bf16_reduce ? 2.0 : e, param_bytes = bf16_params ? 2.0 : e;
  double tail = 0, slack = 0;
  bool have_tail = false;
  for (int i = 0; i < l.pp; ++i) {
    const StageMemory& sm = memory.stages[i];
    const StageTime& st = tb.stages[i];
    const double g = sm.params * grad_bytes;
    double reduce = 0, last_bucket = 0, exposed = 0, ag = 0, emb = 0;
    if (l.dp > 1) {
      const double bucket = std::min(g, cfg.mesh.bucket_mb * kMiB);
      if (l.zero >= 2) {
        reduce = mb * reduce_scatter_seconds(g, l.dp, dp_link) * slow;  // per micro-batch, in the clock
      } else {
        if (cluster.dp_reduce_gbs > 0) {  // measured as it runs, without overlap (cluster.hpp)
          reduce = allreduce_seconds(g, l.dp, LinkSpec{cluster.dp_reduce_gbs, dp_link.latency_us}) * slow;
          exposed = reduce;
        } else {
          reduce = allreduce_seconds(g, l.dp, dp_link) * slow;
          last_bucket = allreduce_seconds(bucket, l.dp, dp_link) * slow;
          // Buckets reduce while the last micro-batch's backward runs (issue 6); the last bucket cannot.
          const double window = st.backward + st.recompute;
          exposed = std::max(last_bucket, reduce - window);
        }
      }
      // ZeRO 1/2 broadcast the updated ranges; ZeRO-3 gathers in the next step's clock instead.
      if (l.zero == 1 || l.zero == 2) ag = allgather_seconds(sm.params * param_bytes, l.dp, dp_link) * slow;
    }
    if (m.tie_embeddings && l.pp > 1 && (i == 0 || i == l.pp - 1))
      emb = allreduce_seconds(Vp * C / t * grad_bytes, 2, pp_link) * slow;
    const double updated = sm.params / (l.zero >= 1 ? l.dp : 1);
    // AdamW streams 28 bytes per parameter it updates: it reads weight, gradient, m, v (16) and writes
    // weight, m, v (12), all fp32; under bf16 the weight it reads and writes is the fp32 master and it
    // writes the working copy's bf16 patterns too (2 more). Plus the gradient-norm pass over the gradients.
    const bool masters = bf16_params && !(l.dp > 1 && l.zero >= 3);  // (ZeRO-3: the partitions are the masters)
    const double opt = updated * (28.0 + (masters ? 2.0 : 0.0) + grad_bytes) / mem_bw;
    const double end = -slack + exposed + emb + opt + ag;
    if (!have_tail || end > tail) {
      have_tail = true;
      tail = end;
      tb.tail_stage = i;
      tb.dp_comm = reduce;
      tb.dp_comm_exposed = l.zero >= 2 ? tb.dp_in_clock : exposed;
      tb.zero_allgather = ag;
      tb.embedding_sync = emb;
      tb.optimizer = opt;
    }
    slack += (st.backward + st.recompute) / v;
  }
  tail = std::max(0.0, tail);
  tb.after_flush = tail;
  tb.step = ideal + tb.pp_bubble + tail;

  const double tokens = double(cfg.train.global_batch) * s;
  tb.tokens_per_s = tokens / tb.step;
  tb.model_flops = model_flops_per_token(m) * tokens;
  double hw = tb.model_flops + 3.0 * 2.0 * tokens * C * (Vp - double(m.vocab_size));
  if (l.recompute == Recompute::Full) hw += double(m.layers) * layer_forward_flops(m, tokens);
  if (l.recompute == Recompute::Selective) hw += double(m.layers) * 2 * tokens * s * C;
  tb.hardware_flops = hw;
  // MFU against the peak of the units the GEMMs run on: tensor cores (bf16 peak) for bf16 training and for
  // fp32 training whose GEMM operands are rounded to bf16 or TF32 on a cluster with tensor cores (as in
  // gemm_rate), the fp32 peak otherwise. (Until 2026-11-26 rounded operands were measured against the fp32
  // peak: an H100's MFU read 467%.)
  const bool rounded = cfg.train.gemm_precision() != MatmulPrecision::FP32 && cluster.peak_tflops_bf16 > 0;
  tb.peak_tflops = rounded ? cluster.peak_tflops_bf16 : cluster.peak_tflops_fp32;
  const double devices = double(placement.devices_used);
  tb.tflops_per_gpu = tb.model_flops / tb.step / devices / 1e12;
  tb.mfu = tb.tflops_per_gpu / tb.peak_tflops;
  tb.hfu = tb.hardware_flops / tb.step / devices / 1e12 / tb.peak_tflops;
  return tb;
}

}  // namespace trident::planner
