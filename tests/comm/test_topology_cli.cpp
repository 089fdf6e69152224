// `trident topology DECK --set ...` under mpiexec: the table and groups are printed once (by rank 0)
// and list the expected TP/PP/DP groups; a mesh that does not match the world is an error; `--ranks N`
// previews the same layout without a launch; on two fake
// nodes (hosts file) the node column is filled and a spanning TP group warns, or fails with
// mesh.strict_placement.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/test_support.hpp"

namespace {

using trident::test::run_command;

const std::string kDeck = std::string(TRIDENT_SOURCE_DIR) + "/input/tiny.toml";

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

int topology(const std::string& launch, const std::string& sets, std::string* out) {
  const std::string cmd = "OPENBLAS_NUM_THREADS=1 timeout -k 3 60 " + launch + " " + trident::test::trident_binary() +
                          " topology " + kDeck + " " + sets;
  const int rc = run_command(cmd, out);
  *out = "$ " + cmd + "\n" + *out;
  return rc;
}

std::string np(int n) { return trident::test::local_mpiexec() + " -n " + std::to_string(n); }

TEST(TopologyCli, Tp2Dp2) {
  std::string out;
  ASSERT_EQ(topology(np(4), "--set mesh.tp=2 --set mesh.dp=2", &out), 0) << out;
  EXPECT_EQ(count(out, "world 4 ranks on 1 node(s); mesh tp 2 x pp 1 x dp 2"), 1) << out;
  EXPECT_EQ(count(out, "TP groups: [0 1] [2 3]\n"), 1) << out;
  EXPECT_EQ(count(out, "PP groups: [0] [1] [2] [3]\n"), 1) << out;
  EXPECT_EQ(count(out, "DP groups: [0 2] [1 3]\n"), 1) << out;
  // rank node local dp pp tp, then the host
  EXPECT_EQ(count(out, "    0     0      0     0     0     0  "), 1) << out;
  EXPECT_EQ(count(out, "    1     0      1     0     0     1  "), 1) << out;
  EXPECT_EQ(count(out, "    2     0      2     1     0     0  "), 1) << out;
  EXPECT_EQ(count(out, "    3     0      3     1     0     1  "), 1) << out;
}

TEST(TopologyCli, Tp2Dp2DataParallelFirst) {
  std::string out;
  ASSERT_EQ(topology(np(4), "--set mesh.tp=2 --set mesh.dp=2 --set mesh.order=dp-tp-pp", &out), 0) << out;
  EXPECT_EQ(count(out, "TP groups: [0 2] [1 3]\n"), 1) << out;
  EXPECT_EQ(count(out, "DP groups: [0 1] [2 3]\n"), 1) << out;
  EXPECT_EQ(count(out, "    1     0      1     1     0     0  "), 1) << out;
}

TEST(TopologyCli, Tp2Pp2) {
  std::string out;
  ASSERT_EQ(topology(np(4), "--set mesh.tp=2 --set mesh.pp=2", &out), 0) << out;
  EXPECT_EQ(count(out, "TP groups: [0 1] [2 3]\n"), 1) << out;
  EXPECT_EQ(count(out, "PP groups: [0 2] [1 3]\n"), 1) << out;
  EXPECT_EQ(count(out, "DP groups: [0] [1] [2] [3]\n"), 1) << out;
}

TEST(TopologyCli, MeshNotMatchingTheWorldFails) {
  std::string out;
  const int rc = topology(np(4), "--set mesh.tp=2", &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(rc, 124) << out;
  EXPECT_EQ(count(out, "TP groups:"), 0) << out;
}

// The lines of `out` that start with `prefix`.
std::vector<std::string> lines_starting(const std::string& out, const std::string& prefix) {
  std::vector<std::string> found;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) found.push_back(line);
  return found;
}

// rank -> "dp pp tp" from the table of a launched job (rank node local dp pp tp host) or of a preview
// (rank dp pp tp).
std::map<int, std::string> coordinates(const std::string& out, bool preview) {
  std::map<int, std::string> coords;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream row(line);
    std::vector<int> v;
    for (int x; row >> x;) v.push_back(x);
    if (v.size() == (preview ? 4u : 6u) && line.find(':') == std::string::npos)
      coords[v[0]] = fmt::format("{} {} {}", v[v.size() - 3], v[v.size() - 2], v[v.size() - 1]);
  }
  return coords;
}

// `topology --ranks N` as one process shows what `mpiexec -n N trident topology` shows of the layout
// (each rank's coordinates, every group), without launching N ranks; as `check --ranks N`, a deck that
// does not fit N ranks is refused.
TEST(TopologyCli, RanksPreviewsTheLayoutOfALaunch) {
  const std::string one = trident::test::without_parent_mpi_env();
  for (const std::string sets : {"--set mesh.tp=2 --set mesh.pp=2", "--set mesh.tp=2 --set mesh.dp=2 --set mesh.order=dp-tp-pp"}) {
    std::string launched, preview;
    ASSERT_EQ(topology(np(4), sets, &launched), 0) << launched;
    ASSERT_EQ(topology(one, "--ranks 4 " + sets, &preview), 0) << preview;
    EXPECT_EQ(count(preview, "layout preview for 4 ranks (not launched"), 1) << preview;
    for (const char* axis : {"TP groups:", "PP groups:", "DP groups:"}) {
      EXPECT_EQ(lines_starting(preview, axis), lines_starting(launched, axis)) << preview << launched;
      EXPECT_EQ(lines_starting(preview, axis).size(), 1u) << preview;
    }
    EXPECT_EQ(coordinates(preview, true).size(), 4u) << preview;
    EXPECT_EQ(coordinates(preview, true), coordinates(launched, false)) << preview << launched;
  }
  std::string out;
  ASSERT_EQ(topology(one, "--ranks 4 --set mesh.tp=2 --set mesh.dp=auto", &out), 0) << out;
  EXPECT_EQ(count(out, "mesh tp 2 x pp 1 x dp 2\n"), 1) << out;
  EXPECT_EQ(coordinates(out, true).size(), 4u) << out;
  EXPECT_EQ(topology(one, "--ranks 3 --set mesh.tp=2", &out), 2) << out;
  EXPECT_EQ(count(out, "but the job has 3 ranks"), 1) << out;
  EXPECT_EQ(count(out, "groups:"), 0) << out;
  EXPECT_EQ(topology(one, "--ranks 0", &out), 2) << out;
  EXPECT_EQ(topology(np(2), "--ranks 4 --set mesh.tp=2 --set mesh.pp=2", &out), 2) << out;
  EXPECT_EQ(count(out, "previews a launch without making it, but this job has 2 ranks"), 1) << out;
}

// Two fake nodes of this host: ranks 0-3 on node 0, 4-7 on node 1 (see run_fake_nodes.sh).
class TopologyFakeNodes : public ::testing::Test {
 protected:
  void SetUp() override {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    std::string second = host;
    if (second == "localhost" || second.empty()) second = "127.0.0.1";  // any second name of this host
    dir_ = trident::test::make_temp_dir("trident-topo");
    trident::test::write_file(dir_ + "/hosts", "localhost:4\n" + second + ":4\n");
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string launch() const {
    return trident::test::local_mpiexec(true) + " -f " + dir_ + "/hosts -n 8";
  }
  std::string dir_;
};

TEST_F(TopologyFakeNodes, NodeColumnAndSpanningWarning) {
  std::string out;
  ASSERT_EQ(topology(launch(), "--set mesh.tp=4 --set mesh.dp=2", &out), 0) << out;
  EXPECT_EQ(count(out, "world 8 ranks on 2 node(s)"), 1) << out;
  EXPECT_EQ(count(out, "    5     1      1     1     0     1  "), 1) << out;
  EXPECT_EQ(count(out, "TP groups: [0 1 2 3] [4 5 6 7]\n"), 1) << out;
  EXPECT_EQ(count(out, "spans nodes"), 0) << out;

  ASSERT_EQ(topology(launch(), "--set mesh.tp=4 --set mesh.dp=2 --set mesh.order=dp-tp-pp", &out), 0) << out;
  EXPECT_EQ(count(out, "TP groups: [0 2 4 6] [1 3 5 7]\n"), 1) << out;
  EXPECT_EQ(count(out, "a TP group spans nodes"), 1) << "the warning is printed once (by rank 0)\n" << out;
}

TEST_F(TopologyFakeNodes, StrictPlacementFails) {
  std::string out;
  const int rc = topology(
      launch(), "--set mesh.tp=4 --set mesh.dp=2 --set mesh.order=dp-tp-pp --set mesh.strict_placement=true", &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(rc, 124) << out;
  EXPECT_GE(count(out, "a TP group spans nodes"), 1) << out;
  EXPECT_NE(out.find("strict_placement"), std::string::npos) << out;
  EXPECT_EQ(count(out, "TP groups:"), 0) << out;
}

}  // namespace
