// Cluster presets and cluster TOML files: every error names file:line:column and the key.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.hpp"
#include "planner/cluster.hpp"
#include "common/test_support.hpp"

namespace trident::planner {
namespace {

std::string error_of(const std::string& text) {
  try {
    parse_cluster(text, "c.toml");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

const char* kFull = R"(name = "mine"
nodes = 4
gpus_per_node = 8
memory_gib = 80
reserved_gib = 2.5
peak_tflops_bf16 = 312
peak_tflops_fp32 = 19.5
gemm_efficiency = 0.7
gemm_half_gflop = 0.5
memory_bandwidth_gbs = 2039
[intra_node]
bandwidth_gbs = 200
latency_us = 4
[inter_node]
bandwidth_gbs = 20
latency_us = 9
)";

TEST(Cluster, PresetsExistWithTheirFigures) {
  for (const char* name : {"a100-40g", "a100-80g", "h100-80g", "h200", "cpu"}) {
    ASSERT_TRUE(is_cluster_preset(name)) << name;
    const ClusterSpec c = load_cluster(name);
    EXPECT_EQ(c.name, name);
    EXPECT_GT(c.gpus_per_node, 0);
    EXPECT_GT(c.memory_gib, 0);
    EXPECT_GT(c.peak_tflops_bf16 + c.peak_tflops_fp32, 0);
    EXPECT_GT(c.intra_node.bandwidth_gbs, 0);
    EXPECT_GT(c.inter_node.bandwidth_gbs, 0);
    EXPECT_GT(c.gemm_efficiency, 0);
    EXPECT_LE(c.gemm_efficiency, 1);
  }
  // Datasheet figures (dense, no sparsity).
  EXPECT_EQ(cluster_preset("a100-80g").memory_gib, 80);
  EXPECT_EQ(cluster_preset("a100-40g").memory_gib, 40);
  EXPECT_EQ(cluster_preset("a100-80g").peak_tflops_bf16, 312);
  EXPECT_EQ(cluster_preset("h100-80g").peak_tflops_bf16, 989);
  EXPECT_EQ(cluster_preset("h200").peak_tflops_bf16, 989);
  EXPECT_GT(cluster_preset("h200").memory_gib, 130);
  // The cpu preset: this machine, 2 cores, fp32 only, oversubscription allowed.
  const ClusterSpec cpu = cluster_preset("cpu");
  EXPECT_EQ(cpu.nodes, 1);
  EXPECT_EQ(cpu.gpus_per_node, 2);
  EXPECT_EQ(cpu.peak_tflops_bf16, 0);
  EXPECT_TRUE(cpu.oversubscribe);
}

TEST(Cluster, FullFileParses) {
  const ClusterSpec c = parse_cluster(kFull, "c.toml");
  EXPECT_EQ(c.name, "mine");
  EXPECT_EQ(c.nodes, 4);
  EXPECT_EQ(c.gpus_per_node, 8);
  EXPECT_DOUBLE_EQ(c.memory_gib, 80);
  EXPECT_DOUBLE_EQ(c.reserved_gib, 2.5);
  EXPECT_DOUBLE_EQ(c.peak_tflops_fp32, 19.5);
  EXPECT_DOUBLE_EQ(c.intra_node.bandwidth_gbs, 200);
  EXPECT_DOUBLE_EQ(c.intra_node.latency_us, 4);
  EXPECT_DOUBLE_EQ(c.inter_node.bandwidth_gbs, 20);
  EXPECT_DOUBLE_EQ(c.inter_node.latency_us, 9);
  EXPECT_EQ(c.source, "c.toml");
}

TEST(Cluster, BaseInheritsFromAPreset) {
  const ClusterSpec c = parse_cluster("base = \"h100-80g\"\nnodes = 64\n[inter_node]\nbandwidth_gbs = 12.5\n", "x/my.toml");
  const ClusterSpec h = cluster_preset("h100-80g");
  EXPECT_EQ(c.name, "my");  // the file's stem when `name` is absent
  EXPECT_EQ(c.nodes, 64);
  EXPECT_EQ(c.peak_tflops_bf16, h.peak_tflops_bf16);
  EXPECT_EQ(c.intra_node.bandwidth_gbs, h.intra_node.bandwidth_gbs);
  EXPECT_DOUBLE_EQ(c.inter_node.bandwidth_gbs, 12.5);
  EXPECT_EQ(c.inter_node.latency_us, h.inter_node.latency_us);
}

TEST(Cluster, UnknownKeyIsAnErrorWithLineAndHint) {
  const std::string e = error_of("base = \"a100-80g\"\n\ngpu_per_node = 4\n");
  EXPECT_NE(e.find("c.toml:3:1"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key 'gpu_per_node'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'gpus_per_node'"), std::string::npos) << e;
}

TEST(Cluster, UnknownKeyInALinkTable) {
  const std::string e = error_of("base = \"a100-80g\"\n[intra_node]\nbandwidth = 100\n");
  EXPECT_NE(e.find("c.toml:3:1"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key 'intra_node.bandwidth'"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'bandwidth_gbs'"), std::string::npos) << e;
}

TEST(Cluster, UnknownTable) {
  const std::string e = error_of("base = \"a100-80g\"\n[storage]\nx = 1\n");
  EXPECT_NE(e.find("unknown key 'storage'"), std::string::npos) << e;
  EXPECT_NE(e.find("c.toml:2:"), std::string::npos) << e;
}

TEST(Cluster, WrongTypeNamesKeyAndLine) {
  std::string e = error_of("base = \"a100-80g\"\ngpus_per_node = \"8\"\n");
  EXPECT_NE(e.find("c.toml:2:17"), std::string::npos) << e;
  EXPECT_NE(e.find("key 'gpus_per_node' must be an integer, got string"), std::string::npos) << e;
  e = error_of("base = \"a100-80g\"\ngpus_per_node = 8.0\n");
  EXPECT_NE(e.find("key 'gpus_per_node' must be an integer, got float"), std::string::npos) << e;
  e = error_of("base = \"a100-80g\"\n[inter_node]\nlatency_us = true\n");
  EXPECT_NE(e.find("c.toml:3:14"), std::string::npos) << e;
  EXPECT_NE(e.find("key 'inter_node.latency_us' must be a number, got boolean"), std::string::npos) << e;
  e = error_of("base = \"a100-80g\"\nintra_node = 5\n");
  EXPECT_NE(e.find("key 'intra_node' must be a table"), std::string::npos) << e;
  e = error_of("base = 3\n");
  EXPECT_NE(e.find("key 'base' must be a string"), std::string::npos) << e;
}

TEST(Cluster, IntegersAreAcceptedForNumbers) {
  const ClusterSpec c = parse_cluster("base = \"a100-80g\"\nmemory_gib = 96\n", "c.toml");
  EXPECT_DOUBLE_EQ(c.memory_gib, 96);
}

TEST(Cluster, OutOfRange) {
  std::string e = error_of("base = \"a100-80g\"\ngemm_efficiency = 1.5\n");
  EXPECT_NE(e.find("c.toml:2:19"), std::string::npos) << e;
  EXPECT_NE(e.find("key 'gemm_efficiency' = 1.5 is out of range"), std::string::npos) << e;
  e = error_of("base = \"a100-80g\"\ngpus_per_node = 0\n");
  EXPECT_NE(e.find("key 'gpus_per_node' = 0 is out of range"), std::string::npos) << e;
  e = error_of("base = \"a100-80g\"\n[intra_node]\nbandwidth_gbs = -1\n");
  EXPECT_NE(e.find("key 'intra_node.bandwidth_gbs' = -1 is out of range"), std::string::npos) << e;
}

TEST(Cluster, MissingRequiredKeyWithoutBase) {
  const std::string e = error_of("gpus_per_node = 8\nmemory_gib = 80\n");
  EXPECT_NE(e.find("missing key 'memory_bandwidth_gbs'"), std::string::npos) << e;
  EXPECT_NE(e.find("c.toml"), std::string::npos) << e;
}

TEST(Cluster, NoPeakAtAll) {
  std::string text = kFull;
  text.replace(text.find("peak_tflops_bf16 = 312"), 22, "peak_tflops_bf16 = 0");
  text.replace(text.find("peak_tflops_fp32 = 19.5"), 23, "peak_tflops_fp32 = 0");
  EXPECT_NE(error_of(text).find("give at least one"), std::string::npos) << error_of(text);
}

TEST(Cluster, UnknownBasePreset) {
  const std::string e = error_of("base = \"a100-80\"\n");
  EXPECT_NE(e.find("c.toml:1:8"), std::string::npos) << e;
  EXPECT_NE(e.find("'a100-80' is not a preset"), std::string::npos) << e;
  EXPECT_NE(e.find("did you mean 'a100-80g'"), std::string::npos) << e;
}

TEST(Cluster, SyntaxErrorNamesTheLine) {
  const std::string e = error_of("base = \"a100-80g\"\nnodes = = 3\n");
  EXPECT_NE(e.find("c.toml:2:"), std::string::npos) << e;
  EXPECT_NE(e.find("TOML syntax error"), std::string::npos) << e;
}

TEST(Cluster, LoadClusterByNameOrPath) {
  EXPECT_THROW(load_cluster("h100"), Error);
  try {
    load_cluster("h100-80");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("neither a preset"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("did you mean 'h100-80g'"), std::string::npos) << e.what();
  }
  try {
    load_cluster("/nonexistent/cluster.toml");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/cluster.toml: cannot open"), std::string::npos) << e.what();
  }
  const std::string dir = trident::test::make_temp_dir("planner_cluster");
  trident::test::write_file(dir + "/bad.toml", "base = \"cpu\"\nfoo = 1\n");
  try {
    load_cluster(dir + "/bad.toml");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/bad.toml:2:1: unknown key 'foo'"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(Cluster, ExampleFilesParse) {
  const std::string dir = std::string(TRIDENT_SOURCE_DIR) + "/input/clusters";
  int n = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    if (f.path().extension() != ".toml") continue;
    SCOPED_TRACE(f.path().string());
    const ClusterSpec c = load_cluster(f.path().string());
    EXPECT_FALSE(c.name.empty());
    ++n;
  }
  EXPECT_GE(n, 2);
}

TEST(Cluster, ToTomlRoundTrips) {
  for (const auto& name : cluster_preset_names()) {
    const ClusterSpec a = cluster_preset(name);
    const ClusterSpec b = parse_cluster(cluster_to_toml(a), name + ".toml");
    EXPECT_EQ(a.gpus_per_node, b.gpus_per_node);
    EXPECT_DOUBLE_EQ(a.memory_gib, b.memory_gib);
    EXPECT_DOUBLE_EQ(a.peak_tflops_bf16, b.peak_tflops_bf16);
    EXPECT_DOUBLE_EQ(a.inter_node.latency_us, b.inter_node.latency_us);
    EXPECT_EQ(a.oversubscribe, b.oversubscribe);
  }
}

}  // namespace
}  // namespace trident::planner
