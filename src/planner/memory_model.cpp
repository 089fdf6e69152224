#include "planner/memory_model.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/matmul_precision.hpp"
#include "model/shapes.hpp"

namespace trident::planner {

bool group_within_node(const std::string& order, const std::string& dim, int tp, int pp, int dp, int ranks_per_node) {
  auto size_of = [&](const std::string& d) { return d == "tp" ? tp : d == "pp" ? pp : dp; };
  const int size = size_of(dim);
  if (size <= 1) return true;
  // Stride of `dim` = product of the sizes of the dimensions that vary faster (listed before it).
  int64_t stride = 1;
  size_t pos = 0;
  while (pos < order.size()) {
    const size_t dash = order.find('-', pos);
    const std::string d = order.substr(pos, dash == std::string::npos ? std::string::npos : dash - pos);
    if (d == dim) break;
    stride *= size_of(d);
    if (dash == std::string::npos) break;
    pos = dash + 1;
  }
  const int64_t span = stride * size;  // a group's members lie in an aligned block of `span` ranks
  return span <= ranks_per_node && ranks_per_node % span == 0;
}

Placement place(const ClusterSpec& c, const Layout& l, const std::string& order, int nodes) {
  Placement p;
  const int world = l.world();
  const int gpn = std::max(1, c.gpus_per_node);
  const int needed = (world + gpn - 1) / gpn;
  const int total_nodes = nodes > 0 ? nodes : (c.nodes > 0 ? c.nodes : needed);
  if (world <= total_nodes * gpn) {
    p.nodes = needed;
    p.ranks_per_node = std::min(world, gpn);
    p.devices_used = world;
  } else {
    if (!c.oversubscribe)
      throw Error(fmt::format("layout {} needs {} devices; cluster '{}' has {} ({} nodes x {} per node)",
                              describe(l), world, c.name, total_nodes * gpn, total_nodes, gpn));
    p.nodes = total_nodes;
    p.ranks_per_node = (world + total_nodes - 1) / total_nodes;
    p.devices_used = total_nodes * gpn;
  }
  p.share = std::min(1.0, double(gpn) / p.ranks_per_node);
  p.tp_intra = group_within_node(order, "tp", l.tp, l.pp, l.dp, p.ranks_per_node);
  p.pp_intra = group_within_node(order, "pp", l.tp, l.pp, l.dp, p.ranks_per_node);
  p.dp_intra = group_within_node(order, "dp", l.tp, l.pp, l.dp, p.ranks_per_node);
  return p;
}

ModelStateBytes model_state_bytes(double params, Precision precision, int zero, int dp) {
  ModelStateBytes s;
  const bool bf16 = precision == Precision::BF16;
  const double shard = zero >= 1 ? 1.0 / dp : 1.0;
  s.parameters = params * (bf16 ? 2 : 4) / (zero >= 3 ? dp : 1);
  s.gradients = params * (bf16 ? 2 : 4) / (zero >= 2 ? dp : 1);
  s.master_weights = bf16 ? params * 4 * shard : 0.0;
  s.optimizer_moments = params * 8 * shard;
  return s;
}

StorageBytes storage_bytes(Precision precision) {
  StorageBytes b;
  if (precision == Precision::BF16) b.saved_activation = 2;
  return b;
}

double attention_score_bytes(const ActivationShape& a) {
  if (a.flash_attention) return 4.0 * a.heads * a.seq * a.micro_batch / a.tp;  // fp32 log-sum-exp per row
  // Softmax output (elem_bytes), dropout mask (1) and dropout output (elem_bytes) of a*s*s*b elements,
  // split over TP ranks by heads.
  const double e = a.elem_bytes, d = a.dropout ? 1.0 : 0.0;
  return a.heads * a.seq * a.seq * a.micro_batch * (e + d + d * e) / a.tp;
}

double layer_activation_bytes(const ActivationShape& a, Recompute recompute) {
  const double sbh = a.seq * a.micro_batch * a.hidden;
  const double e = a.elem_bytes, d = a.dropout ? 1.0 : 0.0;
  const double r = a.residual_bytes > 0 ? a.residual_bytes : e;
  const double t = a.tp;
  if (recompute == Recompute::Full) return r * sbh / (a.sequence_parallel ? t : 1.0);
  // Korthikanti Sec. 4.1, per tensor (16-bit case in brackets):
  //   replicated across TP ranks unless sequence-parallel: the two LayerNorm inputs (4sbh), the two
  //   LayerNorm outputs feeding the QKV and MLP-up GEMMs (4sbh), two dropout masks (2sbh)  -> 10sbh
  //   split by TP: Q, K, V (6sbh), attention-projection input (2sbh), GELU input and output (16sbh) -> 24sbh
  //   attention scores: softmax output, its dropout mask and output (5as^2b), split by TP (heads).
  // The GELU tensors have ffn_hidden = 4h columns in the paper; here they scale with ffn_hidden.
  // Grouped-query attention keeps a narrower K and V; SwiGLU keeps gate, up and their product (3*ffn).
  const double ffn = a.ffn > 0 ? a.ffn : 4 * a.hidden;
  const double kv = a.kv_hidden > 0 ? a.kv_hidden : a.hidden;
  const double sb = a.seq * a.micro_batch;
  const double replicated = sbh * (2 * r + 2 * e + 2 * d);  // LayerNorm inputs are the residual stream
  const double split = e * sb * (a.hidden + 2 * kv) + e * sbh + (a.swiglu ? 3 : 2) * e * sb * ffn;
  const double linear = (a.sequence_parallel ? replicated / t : replicated) + split / t;
  const double scores = recompute == Recompute::Selective ? 0.0 : attention_score_bytes(a);
  return linear + scores;
}

double microbatches_in_flight(Schedule schedule, int pp, int stage, int64_t m, int v) {
  if (schedule == Schedule::GPipe) return double(m);
  if (pp <= 1) return 1.0;
  if (schedule == Schedule::Interleaved && v > 1) {
    const int64_t chunks = std::min<int64_t>(2 * int64_t(pp - stage - 1) + int64_t(v - 1) * pp + 1, int64_t(v) * m);
    return double(chunks) / v;
  }
  return double(std::min<int64_t>(pp - stage, m));
}

std::vector<int64_t> stage_layers(const Config& cfg, const Layout& l) {
  const int64_t chunks = int64_t(l.pp) * l.virtual_stages;
  const int64_t L = cfg.model.layers;
  std::vector<int64_t> per_chunk(chunks);
  const auto& lps = cfg.mesh.layers_per_stage;
  if (int64_t(lps.size()) == chunks) {
    per_chunk = lps;
  } else if (l.virtual_stages == 1 && l.pp > 1 && L >= l.pp) {
    // Balanced by estimated cost (issue 5): the last stage also runs the LM head, worth x layers of
    // forward FLOPs (2hV against 8h^2 + 4h*ffn + 4sh per token). Find the smallest bottleneck T (in
    // layers) such that pp-1 stages of floor(T) layers and a last stage of floor(T - x) hold all L.
    const double C = double(cfg.model.hidden), F = double(ffn_hidden_of(cfg.model)), s = double(cfg.model.seq_len);
    const double x = 2 * C * double(padded_vocab(cfg.model, l.tp)) / (8 * C * C + 4 * C * F + 4 * s * C);
    const int64_t pp = l.pp;
    auto caps = [&](double T) {
      return std::make_pair(int64_t(std::floor(T + 1e-9)), int64_t(std::floor(T - x + 1e-9)));
    };
    std::vector<double> candidates;
    for (int64_t n = 1; n <= L; ++n) candidates.insert(candidates.end(), {double(n), double(n) + x});
    std::sort(candidates.begin(), candidates.end());
    int64_t cap_first = (L + pp - 1) / pp, cap_last = cap_first;
    for (double T : candidates) {
      const auto [cf, cl] = caps(T);
      if (cf >= 1 && cl >= 1 && (pp - 1) * cf + cl >= L) {
        cap_first = cf;
        cap_last = cl;
        break;
      }
    }
    (void)cap_first;
    const int64_t last = std::min(cap_last, L - (pp - 1));
    const int64_t rest = L - last;
    for (int64_t c = 0; c < pp - 1; ++c) per_chunk[c] = rest / (pp - 1) + (c < rest % (pp - 1) ? 1 : 0);
    per_chunk[pp - 1] = last;
  } else {
    for (int64_t c = 0; c < chunks; ++c) per_chunk[c] = L / chunks + (c < L % chunks ? 1 : 0);
  }
  // Chunk c runs on stage c mod pp (Megatron's interleaved assignment; plain chunks when v = 1).
  std::vector<int64_t> stages(l.pp, 0);
  for (int64_t c = 0; c < chunks; ++c) stages[c % l.pp] += per_chunk[c];
  return stages;
}

namespace {
// A rank's width of K (or V): split over TP, or one head per rank (replicated) when tp > kv_heads.
double kv_width_per_rank(const ModelConfig& m, int tp) {
  const int64_t kv_heads = m.kv();
  return double(m.hidden / m.heads) * double(kv_heads) / std::min<double>(tp, double(kv_heads));
}
// The MLP's up projection: gate and up, or c_fc.
double fc_width(const ModelConfig& m) {
  const double F = double(ffn_hidden_of(m));
  return m.mlp == Mlp::SwiGlu ? 2 * F : F;
}
// One norm's parameters: LayerNorm's weight and bias, or RMSNorm's weight.
double norm_params(const ModelConfig& m) { return m.norm == Norm::LayerNorm && m.bias ? 2.0 * m.hidden : m.hidden; }
}  // namespace

double layer_params_per_rank(const ModelConfig& m, int tp) {
  const double C = double(m.hidden), F = double(ffn_hidden_of(m));
  const double kv = kv_width_per_rank(m, tp), fc = fc_width(m);
  const double matrices = C * C / tp        // Q (column-parallel)
                          + 2 * C * kv      // K and V (this rank's share)
                          + C * C / tp      // attention output projection (row-parallel)
                          + C * fc / tp     // MLP up (and gate) (column-parallel)
                          + F * C / tp;     // MLP down (row-parallel)
  return matrices + layer_vector_params_per_rank(m, tp);
}

double layer_vector_params_per_rank(const ModelConfig& m, int tp) {
  const double C = double(m.hidden), b = m.bias ? 1.0 : 0.0;
  return b * (C / tp + 2 * kv_width_per_rank(m, tp) + fc_width(m) / tp)  // column-parallel biases (split)
         + 2 * norm_params(m)                                             // the two norms
         + 2 * b * C;  // biases of the row-parallel projections (added once)
}

double stage_fp32_copy_params_per_rank(const ModelConfig& m, const Layout& l, int stage, int64_t layers) {
  const double wpe = stage == 0 && m.positions == Positions::Learned ? double(m.seq_len) * double(m.hidden) : 0.0;
  return double(layers) * layer_vector_params_per_rank(m, l.tp) + (stage == l.pp - 1 ? norm_params(m) : 0.0) + wpe;
}

double stage_params_per_rank(const ModelConfig& m, const Layout& l, int stage, int64_t layers) {
  const double C = double(m.hidden), V = double(padded_vocab(m, l.tp));
  double p = double(layers) * layer_params_per_rank(m, l.tp);
  if (stage == 0) p += V * C / l.tp;  // vocab-parallel token embedding
  if (stage == 0 && m.positions == Positions::Learned) p += double(m.seq_len) * C;  // replicated wpe
  if (stage == l.pp - 1) {
    p += norm_params(m);  // final norm
    // The LM head: its own matrix when untied; with tied embeddings the last stage keeps a copy when
    // it is not also the first stage (gradients synchronised over the embedding group).
    if (!m.tie_embeddings || l.pp > 1) p += V * C / l.tp;
  }
  return p;
}

double zero2_gradient_staging_bytes(const ModelConfig& m, const Layout& l, int stage, double elem_bytes) {
  const double wte = double(padded_vocab(m, l.tp)) * double(m.hidden) / l.tp;
  const double layer = layer_params_per_rank(m, l.tp);
  const bool holds_wte = stage == 0 || (stage == l.pp - 1 && (!m.tie_embeddings || l.pp > 1));
  const bool shared_wte = m.tie_embeddings && l.pp > 1 && (stage == 0 || stage == l.pp - 1);
  return elem_bytes * ((holds_wte ? std::max(wte, layer) : layer) + layer + (shared_wte ? wte : 0.0));
}

double gemm_operand_copy_bytes(const Config& cfg, const ClusterSpec& cluster, const Layout& l, bool head) {
  const MatmulPrecision precision = cfg.train.gemm_precision();
  const bool cpu = cluster.peak_tflops_bf16 <= 0;
  if (precision == MatmulPrecision::FP32 || (precision == MatmulPrecision::TF32 && !cpu)) return 0;
  const auto& m = cfg.model;
  const double N = double(l.micro_batch) * double(m.seq_len), C = double(m.hidden), t = l.tp;
  const double qkv = (C + 2.0 * double(m.head_dim() * m.kv())) / t, fc = double(ffn_hidden_of(m)) / t;
  const double up = m.mlp == Mlp::SwiGlu ? 2 * fc : fc;
  // On a GPU a bf16 run's GEMMs read bf16 patterns as they are (GemmInput): a layer's kept activations
  // as X (none kept under full recompute; SP gathers the norm outputs, c_attn's and c_fc's X, in fp32)
  // and a bf16 working copy's weights as W (below ZeRO-3).
  const bool patterns = !cpu && cfg.train.precision == Precision::BF16;
  const bool kept = patterns && l.recompute != Recompute::Full;
  const double x_copy = kept ? 0.0 : 1.0;
  const double norm_x_copy = kept && !(l.sequence_parallel && l.tp > 1) ? 0.0 : 1.0;
  const double w_copy = patterns && cfg.train.bf16_working_copy() && !(l.dp > 1 && l.zero >= 3) ? 0.0 : 1.0;
  // Backward of out[N, OC] = in[N, IC] W[OC, IC]^T rounds X, dY and W; the CPU backend takes dY's
  // columns and W's rows a panel of output features at a time (rounded_gemm_panel).
  const auto gemm = [cpu, w_copy](double rows, double IC, double OC, double x) {
    const double panel = cpu ? double(rounded_gemm_panel(int64_t(rows), int64_t(IC), int64_t(OC))) : OC;
    return x * rows * IC + panel * (rows + w_copy * IC);
  };
  double elements = std::max(
      {gemm(N, C, qkv, norm_x_copy), gemm(N, C / t, C, x_copy), gemm(N, C, up, norm_x_copy), gemm(N, fc, C, x_copy)});
  const int64_t vocab_rows = padded_vocab(m, l.tp) / l.tp;  // the head runs logits_chunk_rows at a time
  const double head_rows = double(logits_chunk_rows(cfg.train.logits_chunk_bytes(), vocab_rows, int64_t(N)));
  if (head) elements = std::max(elements, gemm(head_rows, C, double(vocab_rows), 1.0));  // X: ln_f's fp32 output
  return elements * (cpu ? 4.0 : 2.0);
}

double zero3_parameter_gather_bytes(const ModelConfig& m, const Layout& l, double elem_bytes) {
  const double wte = double(padded_vocab(m, l.tp)) * double(m.hidden) / l.tp;
  const double layer = layer_params_per_rank(m, l.tp);
  return elem_bytes * (std::max(wte, layer) + layer);
}

double widened_segment_bytes(const ModelConfig& m, const Layout& l, int stage) {
  const double layer = layer_params_per_rank(m, l.tp);
  const double wpe = stage == 0 && m.positions == Positions::Learned ? double(m.seq_len) * double(m.hidden) : 0.0;
  return 4.0 * std::max(layer, wpe);
}

MemoryEstimate estimate_memory(const Config& cfg, const ClusterSpec& cluster, const Layout& l,
                               const Placement& placement) {
  const auto& m = cfg.model;
  const int64_t mb = micro_batches(cfg, l);
  const StorageBytes bytes = storage_bytes(cfg.train.precision);
  const double e = bytes.communicated;  // buffers, the final LayerNorm's and the head's inputs
  ActivationShape shape;
  shape.seq = double(m.seq_len);
  shape.micro_batch = double(l.micro_batch);
  shape.hidden = double(m.hidden);
  shape.heads = double(m.heads);
  shape.ffn = double(ffn_hidden_of(m));
  shape.kv_hidden = double(m.head_dim() * m.kv());
  shape.swiglu = m.mlp == Mlp::SwiGlu;
  shape.tp = l.tp;
  shape.sequence_parallel = l.sequence_parallel;
  shape.elem_bytes = bytes.saved_activation;
  shape.residual_bytes = bytes.residual;
  shape.dropout = kTridentDropout;
  shape.flash_attention = kTridentFlashAttention;
  const double per_layer = layer_activation_bytes(shape, l.recompute);
  const bool bf16 = cfg.train.precision == Precision::BF16;
  const bool working_copy = cfg.train.bf16_working_copy();
  ActivationShape fp32_shape = shape;
  fp32_shape.elem_bytes = fp32_shape.residual_bytes = 4;
  const double sbh = shape.seq * shape.micro_batch * shape.hidden;
  const double sp_div = l.sequence_parallel ? l.tp : 1.0;
  const double V = double(padded_vocab(m, l.tp));

  MemoryEstimate est;
  est.capacity = cluster.memory_gib * kGiB * placement.share;
  const auto layers = stage_layers(cfg, l);
  for (int s = 0; s < l.pp; ++s) {
    StageMemory st;
    st.stage = s;
    st.layers = layers[s];
    st.params = stage_params_per_rank(m, l, s, layers[s]);
    st.states = model_state_bytes(st.params, Precision::FP32, l.zero, l.dp);  // fp32 under either (storage_bytes)
    // bf16: the working copy is stored in bf16 (2 bytes a parameter), what the model reads in fp32 (biases,
    // norms, the position embedding) in fp32 besides (4 bytes more), plus the fp32 buffers of the segments widened at once (widened_segment_bytes), and its
    // fp32 masters sit beside the moments in the optimizer's range (ZeRO-3's partitions are the masters
    // themselves, and it gathers instead).
    const bool zero3 = l.dp > 1 && l.zero >= 3;
    if (working_copy && !zero3) {
      st.states.master_weights = 4.0 * st.params / (l.dp > 1 && l.zero >= 1 ? l.dp : 1);
      st.states.parameters = 2.0 * st.params + 4.0 * stage_fp32_copy_params_per_rank(m, l, s, layers[s]) +
                             widened_segment_bytes(m, l, s);
    }
    st.in_flight = microbatches_in_flight(l.schedule, l.pp, s, mb, l.virtual_stages);
    st.per_layer_activation = per_layer;
    st.activations = st.in_flight * double(st.layers) * per_layer;
    // The working set during a layer's backward: full recompute rebuilds the layer's activations in fp32,
    // selective its attention statistics; bf16 storage unpacks the kept tensors into one fp32 set.
    if (l.recompute == Recompute::Full)
      st.recompute_working = layer_activation_bytes(fp32_shape, Recompute::None);
    else if (l.recompute == Recompute::Selective)
      st.recompute_working = attention_score_bytes(shape);
    if (bf16 && l.recompute != Recompute::Full)
      st.recompute_working += layer_activation_bytes(fp32_shape, Recompute::Selective) - 2 * 4.0 * sbh / sp_div;
    if (s == 0 && shape.dropout) st.edge_activations += st.in_flight * sbh / sp_div;  // embedding dropout mask
    if (s == l.pp - 1) {
      // Per micro-batch alive on this stage, the final LayerNorm's input and its gradient (a slot's top
      // residual and dtop, model/gpt.cpp); once, as the model owns them and a micro-batch's head runs its
      // forward and backward in one go: the LM-head input (gathered over TP) and the fp32 logits of this
      // rank's vocabulary shard (Korthikanti Sec. 4.3: 4sbh/t * (1 + v/h) with SP) for one chunk of rows
      // (train.logits_chunk_mib).
      const double last_in_flight = microbatches_in_flight(l.schedule, l.pp, l.pp - 1, mb, l.virtual_stages);
      const double logit_rows = double(logits_chunk_rows(cfg.train.logits_chunk_bytes(), int64_t(V) / l.tp,
                                                         int64_t(shape.seq * shape.micro_batch)));
      st.edge_activations += last_in_flight * 2.0 * e * sbh / sp_div + e * sbh + 4.0 * logit_rows * V / l.tp;
    }
    // Communication buffers: two DP buckets in flight (mesh.bucket_mb), PP receive buffers for an
    // activation and a gradient, the all-gathered input of a sequence-parallel GEMM. ZeRO-2 has no
    // buckets but staging buffers for backward's segments (data_parallel/sharded_gradients.hpp): the
    // largest segment (the token embedding on a stage holding it, else a layer) and one layer being
    // reduced, and a tied embedding shared by two stages keeps its whole gradient for the cross-stage sum.
    if (l.dp > 1 && l.zero < 2) st.comm_buffers += std::min(2.0 * cfg.mesh.bucket_mb * kMiB, st.states.gradients);
    // A bf16 reduction (mesh.grad_reduce_dtype) keeps the gradients' bf16 patterns beside them (counted
    // with the gradients, as `train` reports them); under zero 2 and 3, beside each staging buffer.
    const bool bf16_reduce = cfg.mesh.grad_reduce_dtype == Precision::BF16;
    if (l.dp > 1 && l.zero < 2 && bf16_reduce) st.states.gradients += 2.0 * st.params;
    if (l.dp > 1 && l.zero >= 2) st.comm_buffers += zero2_gradient_staging_bytes(m, l, s, bf16_reduce ? e + 2.0 : e);
    // bf16 working copy: ZeRO-3's gather buffers have a bf16 companion each (zero 1/2 broadcast the
    // working copy's patterns in place).
    if (zero3) st.comm_buffers += zero3_parameter_gather_bytes(m, l, working_copy ? e + 2.0 : e);
    if (l.pp > 1) st.comm_buffers += 2.0 * e * sbh;
    if (l.sequence_parallel && l.tp > 1) st.comm_buffers += e * sbh;
    st.gemm_copies = gemm_operand_copy_bytes(cfg, cluster, l, s == l.pp - 1);
    st.reserved = cluster.reserved_gib * kGiB;
    est.stages.push_back(st);
  }
  est.peak_stage = 0;
  for (int s = 1; s < l.pp; ++s)
    if (est.stages[s].total() > est.stages[est.peak_stage].total()) est.peak_stage = s;
  est.fits = est.peak_bytes() <= est.capacity;
  return est;
}

}  // namespace trident::planner
