#pragma once
// The machine a plan is made for: built-in presets (a100-40g, a100-80g, h100-80g, h200, cpu) or a TOML
// file (see input/clusters/ and docs/planner.md for every key). Figures are per device (GPU, or one CPU
// core running one rank); bandwidths are achievable bus bandwidths, not nominal link rates.
#include <string>
#include <vector>

namespace trident::planner {

struct LinkSpec {
  double bandwidth_gbs = 0;  // GB/s (1e9 bytes) per device, per direction, as a collective achieves it
  double latency_us = 0;     // per message / per collective step
};

struct ClusterSpec {
  std::string name;         // preset name, or the `name` key (the file name when absent)
  std::string description;
  std::string source;       // "preset" or the file path
  int nodes = 0;            // 0: as many nodes as the deck's own layout needs
  int gpus_per_node = 8;    // devices per node (CPU preset: cores, one rank each)
  double memory_gib = 80;   // memory per device, GiB (2^30 bytes), as nvidia-smi reports it
  double reserved_gib = 0;  // per device, not available to the model (runtime context, workspaces, fragmentation)
  double peak_tflops_bf16 = 0;  // dense bf16/fp16 peak per device; 0 = no 16-bit support
  double peak_tflops_fp32 = 0;  // fp32 peak per device (for CPU: measured large-sgemm rate)
  double gemm_efficiency = 0.7;    // achievable fraction of peak for large GEMMs
  double gemm_half_gflop = 0.5;    // GEMM size (GFLOP) at which half of that fraction is reached
  double memory_bandwidth_gbs = 2000;  // device memory bandwidth (elementwise kernels, optimizer step)
  LinkSpec intra_node;  // NVLink/NVSwitch (CPU: MPI over shared memory)
  LinkSpec inter_node;  // InfiniBand/RoCE, per device
  bool oversubscribe = false;  // more ranks than devices per node allowed (they share the devices)
  // The data-parallel gradient reduction as training runs it (non-blocking bucket all-reduces started
  // from backward). 0: it runs at the DP link's bandwidth, hidden behind backward but for the last
  // bucket (NCCL on its own stream). > 0: its measured bandwidth (GB/s) where it cannot overlap: MPICH
  // without a progress thread advances a non-blocking all-reduce only inside MPI calls (the cpu preset).
  double dp_reduce_gbs = 0;

  int devices(int nodes_used) const { return nodes_used * gpus_per_node; }
};

// A built-in preset by name, a TOML file by path. Throws trident::Error naming file:line:column and the
// key for bad files (syntax, unknown key, wrong type, out of range, missing key).
ClusterSpec load_cluster(const std::string& name_or_path);

// Parses cluster TOML text; `source_name` stands for the file in messages.
ClusterSpec parse_cluster(const std::string& text, const std::string& source_name);

// Built-in presets.
const std::vector<std::string>& cluster_preset_names();
bool is_cluster_preset(const std::string& name);
ClusterSpec cluster_preset(const std::string& name);

// The cluster as TOML text (every key), e.g. to start a file of one's own from a preset.
std::string cluster_to_toml(const ClusterSpec& c);

}  // namespace trident::planner
