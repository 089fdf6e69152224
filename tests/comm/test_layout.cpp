// MeshLayout: the pure rank <-> (dp, pp, tp) maths, no communication. Expected coordinates for small
// meshes are written out by hand for all six orders; larger meshes are checked against properties and
// an independent decoder (comm_test_util.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "comm/topology.hpp"
#include "comm_test_util.hpp"
#include "core/error.hpp"

namespace trident {
namespace {

using test::mesh_config;

struct Expected {
  const char* order;
  // (dp, pp, tp) of ranks 0..11 of a tp 2 x pp 3 x dp 2 mesh.
  std::array<std::array<int, 3>, 12> coords;
};

// Written by hand from "the first axis of the order varies fastest".
const Expected kMesh232[] = {
    {"tp-dp-pp",
     {{{0, 0, 0}, {0, 0, 1}, {1, 0, 0}, {1, 0, 1}, {0, 1, 0}, {0, 1, 1},
       {1, 1, 0}, {1, 1, 1}, {0, 2, 0}, {0, 2, 1}, {1, 2, 0}, {1, 2, 1}}}},
    {"tp-pp-dp",
     {{{0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {0, 1, 1}, {0, 2, 0}, {0, 2, 1},
       {1, 0, 0}, {1, 0, 1}, {1, 1, 0}, {1, 1, 1}, {1, 2, 0}, {1, 2, 1}}}},
    {"dp-tp-pp",
     {{{0, 0, 0}, {1, 0, 0}, {0, 0, 1}, {1, 0, 1}, {0, 1, 0}, {1, 1, 0},
       {0, 1, 1}, {1, 1, 1}, {0, 2, 0}, {1, 2, 0}, {0, 2, 1}, {1, 2, 1}}}},
    {"dp-pp-tp",
     {{{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {1, 1, 0}, {0, 2, 0}, {1, 2, 0},
       {0, 0, 1}, {1, 0, 1}, {0, 1, 1}, {1, 1, 1}, {0, 2, 1}, {1, 2, 1}}}},
    {"pp-tp-dp",
     {{{0, 0, 0}, {0, 1, 0}, {0, 2, 0}, {0, 0, 1}, {0, 1, 1}, {0, 2, 1},
       {1, 0, 0}, {1, 1, 0}, {1, 2, 0}, {1, 0, 1}, {1, 1, 1}, {1, 2, 1}}}},
    {"pp-dp-tp",
     {{{0, 0, 0}, {0, 1, 0}, {0, 2, 0}, {1, 0, 0}, {1, 1, 0}, {1, 2, 0},
       {0, 0, 1}, {0, 1, 1}, {0, 2, 1}, {1, 0, 1}, {1, 1, 1}, {1, 2, 1}}}},
};

TEST(MeshLayout, HandWrittenCoordinatesForAllSixOrders) {
  for (const auto& e : kMesh232) {
    SCOPED_TRACE(e.order);
    const MeshLayout L(mesh_config(2, 3, 2, e.order));
    ASSERT_EQ(L.world_size(), 12);
    EXPECT_EQ(L.tp_size(), 2);
    EXPECT_EQ(L.pp_size(), 3);
    EXPECT_EQ(L.dp_size(), 2);
    for (int r = 0; r < 12; ++r) {
      const Coord c = L.coord_of(r);
      EXPECT_EQ(c.dp, e.coords[r][0]) << "rank " << r;
      EXPECT_EQ(c.pp, e.coords[r][1]) << "rank " << r;
      EXPECT_EQ(c.tp, e.coords[r][2]) << "rank " << r;
      EXPECT_EQ(L.rank_of(Coord{e.coords[r][0], e.coords[r][1], e.coords[r][2]}), r);
    }
  }
}

TEST(MeshLayout, HandWrittenGroups) {
  {
    const MeshLayout L(mesh_config(2, 3, 2, "tp-dp-pp"));
    EXPECT_EQ(L.tp_group(0), (std::vector<int>{0, 1}));
    EXPECT_EQ(L.tp_group(7), (std::vector<int>{6, 7}));
    EXPECT_EQ(L.dp_group(0), (std::vector<int>{0, 2}));
    EXPECT_EQ(L.dp_group(9), (std::vector<int>{9, 11}));
    EXPECT_EQ(L.pp_group(0), (std::vector<int>{0, 4, 8}));
    EXPECT_EQ(L.pp_group(7), (std::vector<int>{3, 7, 11}));
  }
  {
    const MeshLayout L(mesh_config(2, 3, 2, "pp-dp-tp"));
    EXPECT_EQ(L.tp_group(0), (std::vector<int>{0, 6}));
    EXPECT_EQ(L.dp_group(0), (std::vector<int>{0, 3}));
    EXPECT_EQ(L.pp_group(0), (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(L.tp_group(10), (std::vector<int>{4, 10}));
    EXPECT_EQ(L.dp_group(10), (std::vector<int>{7, 10}));
    EXPECT_EQ(L.pp_group(10), (std::vector<int>{9, 10, 11}));
  }
  {
    // The fake two-node case: tp 4 x dp 2.
    const MeshLayout A(mesh_config(4, 1, 2, "tp-dp-pp"));
    EXPECT_EQ(A.tp_group(2), (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(A.tp_group(5), (std::vector<int>{4, 5, 6, 7}));
    EXPECT_EQ(A.dp_group(5), (std::vector<int>{1, 5}));
    EXPECT_EQ(A.pp_group(5), (std::vector<int>{5}));
    const MeshLayout B(mesh_config(4, 1, 2, "dp-tp-pp"));
    EXPECT_EQ(B.tp_group(2), (std::vector<int>{0, 2, 4, 6}));
    EXPECT_EQ(B.tp_group(5), (std::vector<int>{1, 3, 5, 7}));
    EXPECT_EQ(B.dp_group(5), (std::vector<int>{4, 5}));
  }
}

TEST(MeshLayout, HandWrittenSpotChecksWithThreeDistinctSizes) {
  // tp 2 x pp 4 x dp 3: no two axes of equal size, so a size/stride mix-up cannot cancel out.
  const MeshLayout A(mesh_config(2, 4, 3, "tp-dp-pp"));  // rank = tp + 2*(dp + 3*pp)
  EXPECT_EQ(A.coord_of(13), (Coord{0, 2, 1}));
  EXPECT_EQ(A.coord_of(23), (Coord{2, 3, 1}));
  EXPECT_EQ(A.rank_of(Coord{1, 2, 0}), 14);
  const MeshLayout B(mesh_config(2, 4, 3, "pp-tp-dp"));  // rank = pp + 4*(tp + 2*dp)
  EXPECT_EQ(B.coord_of(13), (Coord{1, 1, 1}));
  EXPECT_EQ(B.coord_of(23), (Coord{2, 3, 1}));
  EXPECT_EQ(B.rank_of(Coord{2, 0, 1}), 20);
  EXPECT_EQ(B.pp_group(13), (std::vector<int>{12, 13, 14, 15}));
  EXPECT_EQ(B.dp_group(13), (std::vector<int>{5, 13, 21}));
}

// For every mesh of up to 24 ranks and every order: bijection, agreement with the reference decoder,
// and TP/PP/DP groups that partition the world, each ordered along its axis.
TEST(MeshLayout, PropertiesForEveryMeshUpTo24Ranks) {
  int meshes = 0;
  for (int n = 1; n <= 24; ++n) {
    for (const auto& f : test::factorisations(n)) {
      for (const char* order : test::all_orders()) {
        SCOPED_TRACE(::testing::Message() << "tp " << f.tp << " pp " << f.pp << " dp " << f.dp << " " << order);
        ++meshes;
        const MeshLayout L(mesh_config(f.tp, f.pp, f.dp, order));
        const test::RefLayout ref{f.tp, f.pp, f.dp, order};
        ASSERT_EQ(L.world_size(), n);
        std::set<std::array<int, 3>> seen;
        std::map<std::string, std::set<std::vector<int>>> groups;
        for (int r = 0; r < n; ++r) {
          const Coord c = L.coord_of(r);
          ASSERT_EQ(c, ref.coord(r)) << "rank " << r;
          ASSERT_EQ(L.rank_of(c), r);
          ASSERT_TRUE(c.tp >= 0 && c.tp < f.tp && c.pp >= 0 && c.pp < f.pp && c.dp >= 0 && c.dp < f.dp);
          seen.insert({c.dp, c.pp, c.tp});
          const std::vector<int> tp = L.tp_group(r), pp = L.pp_group(r), dp = L.dp_group(r);
          ASSERT_EQ(tp, ref.group(r, "tp"));
          ASSERT_EQ(pp, ref.group(r, "pp"));
          ASSERT_EQ(dp, ref.group(r, "dp"));
          // The rank sits in its own groups at its coordinate along the axis.
          ASSERT_EQ(tp.at(c.tp), r);
          ASSERT_EQ(pp.at(c.pp), r);
          ASSERT_EQ(dp.at(c.dp), r);
          groups["tp"].insert(tp);
          groups["pp"].insert(pp);
          groups["dp"].insert(dp);
        }
        ASSERT_EQ(static_cast<int>(seen.size()), n) << "coordinates are not a bijection";
        // Each axis's groups are disjoint and cover the world.
        const std::map<std::string, int> group_size = {{"tp", f.tp}, {"pp", f.pp}, {"dp", f.dp}};
        for (const auto& [axis, gs] : groups) {
          std::vector<int> all;
          for (const auto& g : gs) {
            ASSERT_EQ(static_cast<int>(g.size()), group_size.at(axis)) << axis;
            all.insert(all.end(), g.begin(), g.end());
          }
          std::sort(all.begin(), all.end());
          std::vector<int> world(n);
          for (int r = 0; r < n; ++r) world[r] = r;
          ASSERT_EQ(all, world) << axis << " groups do not partition the world";
          ASSERT_EQ(static_cast<int>(gs.size()), n / group_size.at(axis));
        }
        // A TP group and a DP group (or PP group) share exactly one rank.
        for (int r = 0; r < n; ++r) {
          std::vector<int> tp = L.tp_group(r), dp = L.dp_group(r), both;
          std::sort(tp.begin(), tp.end());
          std::sort(dp.begin(), dp.end());
          std::set_intersection(tp.begin(), tp.end(), dp.begin(), dp.end(), std::back_inserter(both));
          ASSERT_EQ(both, std::vector<int>{r});
        }
      }
    }
  }
  EXPECT_GT(meshes, 300);
}

TEST(MeshLayout, TpFirstKeepsTpGroupsContiguous) {
  for (const char* order : {"tp-dp-pp", "tp-pp-dp"}) {
    const MeshLayout L(mesh_config(4, 2, 3, order));
    for (int r = 0; r < L.world_size(); ++r) {
      const auto g = L.tp_group(r);
      EXPECT_EQ(g.back() - g.front(), 3) << order << " rank " << r;
      EXPECT_EQ(g.front() % 4, 0);
    }
  }
}

TEST(MeshLayout, RejectsBadOrdersAndSizes) {
  for (const char* bad : {"tp-tp-pp", "dp-dp-dp", "tp-dp-xx", "tp_dp_pp", "tp-dp", "", "TP-DP-PP", "tp-dp-pp-"}) {
    EXPECT_THROW(MeshLayout(mesh_config(2, 2, 2, bad)), Error) << bad;
  }
  EXPECT_THROW(MeshLayout(mesh_config(0, 2, 2, "tp-dp-pp")), Error);
  EXPECT_THROW(MeshLayout(mesh_config(2, -1, 2, "tp-dp-pp")), Error);
  const MeshLayout L(mesh_config(2, 2, 2, "tp-dp-pp"));
  EXPECT_THROW(L.coord_of(-1), Error);
  EXPECT_THROW(L.coord_of(8), Error);
}

}  // namespace
}  // namespace trident
