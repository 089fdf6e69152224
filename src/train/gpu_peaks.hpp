#pragma once
// MFU's reference on a GPU: the dense bf16 tensor-core peak from NVIDIA's data sheet for the device's
// product, looked up by the name the CUDA runtime reports (cudaDeviceProp::name; nvidia-smi's "name"
// column shows the same string). Data sheets give the bf16 figure "with sparsity"; the dense figure is
// half of it. A device not in the table falls back to the clock-derived figure of the CUDA backend
// (SMs x peak clock x FLOP/clock/SM: about 1070 TFLOP/s on an H100 SXM, above the data sheet's 989
// because the data sheet uses a lower clock), and the log says which (train/peak_throughput.hpp).
// benchmarks/gpu/compare_table.py holds the same table for its comparison with llm.c and PyTorch;
// tests/benchmarks/test_gpu_compare.py checks that the two agree.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace trident {

struct GpuPeak {
  std::string device_name;  // cudaDeviceProp::name, exactly as the runtime reports it
  std::string product;      // the data sheet's product: "H100 SXM"
  double bf16_dense_tflops = 0;
};

// Every entry, in the table's order.
const std::vector<GpuPeak>& gpu_peak_table();

// The entry whose device name equals `device_name` (leading and trailing blanks ignored); none for
// any other name, a prefixed one included ("gpu-sim NVIDIA H100 80GB HBM3" is gpu-sim, not an H100).
std::optional<GpuPeak> find_gpu_peak(std::string_view device_name);

}  // namespace trident
