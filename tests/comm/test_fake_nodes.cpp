// Node detection and TP placement on two fake nodes of one host (8 ranks), launched by
// run_fake_nodes.sh in one of two ways, named by TRIDENT_FAKE_NODES:
//   block       a hydra hosts file "localhost:4" + "$(hostname):4": ranks 0-3 on node 0, 4-7 on node 1
//   roundrobin  MPIR_CVAR_NUM_CLIQUES=2: MPI_Comm_split_type sees two cliques, rank r on node r % 2
// The expected node of every rank is written out per scheme; whether a TP group spans nodes is then
// predicted from the independent layout decoder and compared with ParallelMesh::tp_spans_nodes().
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "comm/mesh.hpp"
#include "comm_test_util.hpp"
#include "common/test_support.hpp"
#include "core/error.hpp"

namespace trident {
namespace {

using test::mesh_config;
using test::world_rank;

std::string scheme() { return test::env_or("TRIDENT_FAKE_NODES", ""); }

int expected_node(int rank) { return scheme() == "block" ? rank / 4 : rank % 2; }

class FakeNodes : public ::testing::Test {
 protected:
  void SetUp() override {
    if (scheme() != "block" && scheme() != "roundrobin")
      FAIL() << "TRIDENT_FAKE_NODES is not set: run through tests/comm/run_fake_nodes.sh";
    ASSERT_EQ(test::world_size(), 8) << "the fake-node tests need 8 ranks";
  }
};

// True when any rank's TP group holds ranks of more than one (expected) node.
bool predicted_span(const test::RefLayout& ref) {
  for (int r = 0; r < ref.world(); ++r)
    for (int m : ref.group(r, "tp"))
      if (expected_node(m) != expected_node(r)) return true;
  return false;
}

bool any_rank(bool mine) {
  int v = mine ? 1 : 0, any = 0;
  MPI_Allreduce(&v, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any != 0;
}

TEST_F(FakeNodes, DetectNodeSeesTwoNodesOfFour) {
  const int me = world_rank();
  const NodeInfo info = detect_node(MPI_COMM_WORLD);
  EXPECT_EQ(info.num_nodes, 2);
  EXPECT_EQ(info.local_size, 4);
  EXPECT_EQ(info.node, expected_node(me)) << "scheme " << scheme();
  EXPECT_EQ(info.local_rank, scheme() == "block" ? me % 4 : me / 2);
}

TEST_F(FakeNodes, NamedPlacements) {
  struct Case {
    MeshConfig cfg;
    bool spans;
  };
  // The sensible layout for each scheme keeps TP inside a node; the other one does not.
  const bool block = scheme() == "block";
  const Case cases[] = {
      {mesh_config(4, 1, 2, "tp-dp-pp"), !block},  // TP = {0..3}, {4..7}
      {mesh_config(4, 1, 2, "dp-tp-pp"), block},   // TP = {0,2,4,6}, {1,3,5,7}
      {mesh_config(8, 1, 1, "tp-dp-pp"), true},    // one TP group of the whole world
      {mesh_config(2, 2, 2, "tp-pp-dp"), !block},  // TP = {0,1}, {2,3}, {4,5}, {6,7}
      {mesh_config(2, 2, 2, "pp-tp-dp"), false},   // TP = {0,2}, {1,3}, {4,6}, {5,7}: inside a node both ways
      {mesh_config(2, 2, 2, "dp-pp-tp"), block},   // TP = {0,4}, {1,5}, {2,6}, {3,7}
      {mesh_config(1, 4, 2, "pp-dp-tp"), false},   // tp 1 never spans
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << "tp " << c.cfg.tp << " pp " << c.cfg.pp << " dp " << c.cfg.dp << " "
                                      << c.cfg.order);
    ParallelMesh mesh(MPI_COMM_WORLD, c.cfg, MpiWait::Poll);
    EXPECT_EQ(mesh.node().node, expected_node(world_rank()));
    EXPECT_EQ(any_rank(mesh.tp_spans_nodes()), c.spans);
    // A rank's own flag: does its TP group (from the independent decoder) cross its node?
    bool mine = false;
    for (int m : test::RefLayout{c.cfg.tp, c.cfg.pp, c.cfg.dp, c.cfg.order}.group(world_rank(), "tp"))
      mine |= expected_node(m) != expected_node(world_rank());
    EXPECT_EQ(mesh.tp_spans_nodes(), mine);
  }
}

TEST_F(FakeNodes, EveryMeshMatchesThePrediction) {
  for (const auto& f : test::factorisations(8)) {
    if (f.tp == 1) continue;  // a TP group of one never spans (covered by NamedPlacements)
    for (const char* order : {"tp-dp-pp", "dp-tp-pp", "pp-dp-tp"}) {
      const test::RefLayout ref{f.tp, f.pp, f.dp, order};
      SCOPED_TRACE(::testing::Message() << "tp " << f.tp << " pp " << f.pp << " dp " << f.dp << " " << order);
      ParallelMesh mesh(MPI_COMM_WORLD, mesh_config(f.tp, f.pp, f.dp, order), MpiWait::Poll);
      EXPECT_EQ(any_rank(mesh.tp_spans_nodes()), predicted_span(ref));
    }
  }
}

TEST_F(FakeNodes, StrictPlacementThrowsOnlyWhenTpSpans) {
  const bool block = scheme() == "block";
  const MeshConfig spanning = mesh_config(4, 1, 2, block ? "dp-tp-pp" : "tp-dp-pp", /*strict=*/true);
  const MeshConfig inside = mesh_config(4, 1, 2, block ? "tp-dp-pp" : "dp-tp-pp", /*strict=*/true);
  // Every rank throws the same error (the constructor decides on an all-reduced flag).
  bool threw = false;
  try {
    ParallelMesh mesh(MPI_COMM_WORLD, spanning, MpiWait::Poll);
  } catch (const Error& e) {
    threw = true;
    EXPECT_NE(std::string(e.what()).find("spans nodes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("strict_placement"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(threw);
  int all = threw ? 1 : 0, min = 0;
  MPI_Allreduce(&all, &min, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  EXPECT_EQ(min, 1) << "some rank did not throw";
  // tp = 8 spans under either scheme.
  EXPECT_THROW(ParallelMesh(MPI_COMM_WORLD, mesh_config(8, 1, 1, "tp-dp-pp", true), MpiWait::Poll), Error);
  // The same sizes with TP kept inside a node construct fine.
  EXPECT_NO_THROW({
    ParallelMesh mesh(MPI_COMM_WORLD, inside, MpiWait::Poll);
    EXPECT_FALSE(mesh.tp_spans_nodes());
  });
}

}  // namespace
}  // namespace trident
