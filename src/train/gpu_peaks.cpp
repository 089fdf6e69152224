#include "train/gpu_peaks.hpp"

namespace trident {

const std::vector<GpuPeak>& gpu_peak_table() {
  // Dense bf16 = the data sheet's "BF16 Tensor Core" figure with sparsity / 2.
  static const std::vector<GpuPeak> table = {
      // NVIDIA A100 Tensor Core GPU data sheet (2021): BF16 Tensor Core 312 TFLOPS (624 with sparsity),
      // the same for the SXM4 and the PCIe cards, 40 GB and 80 GB.
      {"NVIDIA A100-SXM4-40GB", "A100 SXM4 40GB", 312},
      {"NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB", 312},
      {"NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB", 312},
      {"NVIDIA A100 80GB PCIe", "A100 PCIe 80GB", 312},
      // NVIDIA H100 Tensor Core GPU data sheet: BF16 Tensor Core 1,979 TFLOPS with sparsity (H100 SXM),
      // 1,513 (H100 PCIe, the 2022 data sheet), 1,671 (H100 NVL, the 2024 data sheet, per GPU).
      {"NVIDIA H100 80GB HBM3", "H100 SXM", 989},
      {"NVIDIA H100 PCIe", "H100 PCIe", 756},
      {"NVIDIA H100 NVL", "H100 NVL", 835},
      // NVIDIA H200 Tensor Core GPU data sheet (2024): BF16 Tensor Core 1,979 TFLOPS with sparsity (H200
      // SXM), 1,671 (H200 NVL). Some H200 NVL boards report "NVIDIA H200" and are then measured against
      // the SXM figure.
      {"NVIDIA H200", "H200 SXM", 989},
      {"NVIDIA H200 NVL", "H200 NVL", 835},
      // NVIDIA GH200 Grace Hopper Superchip data sheet (2023): the Hopper GPU's BF16 Tensor Core 1,979
      // TFLOPS with sparsity.
      {"NVIDIA GH200 480GB", "GH200", 989},
  };
  return table;
}

std::optional<GpuPeak> find_gpu_peak(std::string_view name) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  while (!name.empty() && blank(name.front())) name.remove_prefix(1);
  while (!name.empty() && blank(name.back())) name.remove_suffix(1);
  for (const GpuPeak& p : gpu_peak_table())
    if (p.device_name == name) return p;
  return std::nullopt;
}

}  // namespace trident
