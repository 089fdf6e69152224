// MFU's reference on a GPU (train/gpu_peaks.hpp, train/peak_throughput.hpp): the dense bf16 peak of
// NVIDIA's data sheet for the device's product, found by the exact name the CUDA runtime reports; the
// clock-derived figure, said to be so, for any other device. Runs on the CPU: the lookup is a pure
// function of the name. Expected figures: the data sheets' bf16 "with sparsity" figures halved
// (A100 624 -> 312; H100 SXM 1,979 -> 989; H100 PCIe 1,513 -> 756; H100 NVL 1,671 -> 835; H200 as
// H100 SXM, H200 NVL as H100 NVL), written here, not read from the table.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "train/gpu_peaks.hpp"
#include "train/peak_throughput.hpp"

namespace trident::test {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(GpuPeaks, DataSheetFiguresByTheRuntimesDeviceName) {
  const std::pair<const char*, double> want[] = {
      {"NVIDIA H100 80GB HBM3", 989},  {"NVIDIA H100 PCIe", 756},      {"NVIDIA H100 NVL", 835},
      {"NVIDIA H200", 989},            {"NVIDIA H200 NVL", 835},       {"NVIDIA GH200 480GB", 989},
      {"NVIDIA A100-SXM4-80GB", 312},  {"NVIDIA A100-SXM4-40GB", 312}, {"NVIDIA A100-PCIE-40GB", 312},
      {"NVIDIA A100 80GB PCIe", 312},
  };
  for (const auto& [name, tflops] : want) {
    const auto p = find_gpu_peak(name);
    ASSERT_TRUE(p) << name;
    EXPECT_EQ(p->bf16_dense_tflops, tflops) << name;
    EXPECT_EQ(p->device_name, name);
  }
  EXPECT_EQ(gpu_peak_table().size(), std::size(want));  // a new entry needs its expected figure here
  EXPECT_EQ(find_gpu_peak("NVIDIA H100 80GB HBM3")->product, "H100 SXM");
  EXPECT_EQ(find_gpu_peak("NVIDIA H100 PCIe")->product, "H100 PCIe");
  EXPECT_EQ(find_gpu_peak("  NVIDIA H100 PCIe\n")->bf16_dense_tflops, 756);  // nvidia-smi's padding
}

TEST(GpuPeaks, OtherNamesAreNotGuessed) {
  // gpu-sim's simulated H100 (gpusim/src/devices.cpp) is not an H100; nor are partial or other names.
  for (const char* name : {"gpu-sim NVIDIA H100 80GB HBM3", "NVIDIA H100", "H100 80GB HBM3", "nvidia h100 pcie",
                           "NVIDIA H100 PCIe (MIG 1g.10gb)", "NVIDIA GeForce RTX 4090", "NVIDIA L40S", ""})
    EXPECT_FALSE(find_gpu_peak(name)) << name;
}

TEST(GpuPeaks, NamesAreUnique) {
  std::set<std::string> seen;
  for (const GpuPeak& p : gpu_peak_table()) EXPECT_TRUE(seen.insert(p.device_name).second) << p.device_name;
}

TEST(GpuPeaks, ReferenceNamesItsSource) {
  int clock_calls = 0;
  const auto clock = [&] {
    ++clock_calls;
    return 1070.5;
  };
  const PeakThroughput sxm = gpu_peak_throughput("NVIDIA H100 80GB HBM3", clock);
  EXPECT_EQ(sxm.tflops, 989);
  EXPECT_THAT(sxm.source, StartsWith("H100 SXM dense bf16 peak from NVIDIA's data sheet"));
  EXPECT_THAT(sxm.source, HasSubstr("\"NVIDIA H100 80GB HBM3\""));
  EXPECT_EQ(clock_calls, 0);  // the clock is not consulted for a known device

  const PeakThroughput sim = gpu_peak_throughput("gpu-sim NVIDIA H100 80GB HBM3", clock);
  EXPECT_EQ(sim.tflops, 1070.5);
  EXPECT_THAT(sim.source, StartsWith("clock-derived, device not in the table: \"gpu-sim NVIDIA H100 80GB HBM3\""));
  EXPECT_EQ(clock_calls, 1);
}

}  // namespace
}  // namespace trident::test
