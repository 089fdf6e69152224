// ParallelMesh and Group under MPI, registered at 1, 2, 4 and 8 ranks: on one host (one node), or
// inside a Slurm allocation of several nodes (jobs/ctest_allocation.sh), where the expected node of
// each rank comes from the node names the ranks report (SLURMD_NODENAME, else the host name).
// For every (tp, pp, dp) factorisation of the world and several orders: this rank's coordinates and
// its groups against an independent decoder, then every collective in every group (all_reduce,
// iall_reduce, all_gather, reduce_scatter, broadcast, ireduce, ibroadcast, an isend/irecv ring and a blocking send/recv
// ring) against values computed from the members' world ranks, and the byte counters against the
// analytic payload. MpiWait::Poll runs everywhere; MpiWait::Block runs in full at 1 and 2 ranks and
// as a smoke test at 4 and 8, where blocked ranks spin on the 2 cores (see the toolchain notes).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <numeric>
#include <set>
#include <thread>

#include "comm/mesh.hpp"
#include "comm_test_util.hpp"
#include "common/test_support.hpp"
#include "core/error.hpp"

namespace trident {
namespace {

using test::mesh_config;
using test::RefLayout;
using test::world_rank;
using test::world_size;

std::vector<MpiWait> full_wait_modes() {
  if (world_size() <= 2) return {MpiWait::Block, MpiWait::Poll};
  return {MpiWait::Poll};
}

// The orders to build for the i-th factorisation: all six at up to 4 ranks; at 8 ranks (10
// factorisations, oversubscribed: a mesh costs ~0.7 s of blocking communicator set-up) one each,
// cycling through the six, so that every order and every factorisation is built once. The layout
// maths of every combination is tested without communication in test_layout.cpp.
std::vector<const char*> orders_to_test(size_t i) {
  const auto& all = test::all_orders();
  if (world_size() <= 4) return {all.begin(), all.end()};
  return {all[i % all.size()]};
}

int64_t op_bytes(const Group& g, CommOp op) { return g.counters().bytes[static_cast<size_t>(op)]; }
int64_t op_calls(const Group& g, CommOp op) { return g.counters().calls[static_cast<size_t>(op)]; }

// Runs every operation of `g` once or more and checks the results from the members' world ranks
// (`members`, in group-rank order, computed independently of the group) and the byte counters.
void check_collectives(Group& g, const std::vector<int>& members) {
  SCOPED_TRACE(::testing::Message() << "group " << g.name() << " of " << members.size());
  const int s = static_cast<int>(members.size());
  const int me = world_rank();
  ASSERT_EQ(g.size(), s);
  ASSERT_EQ(members.at(g.rank()), me);
  ASSERT_EQ(g.world_ranks(), members);
  const int64_t member_sum = std::accumulate(members.begin(), members.end(), int64_t{0});
  const int member_max = *std::max_element(members.begin(), members.end());
  g.reset_counters();

  // all_reduce, int64 sum.
  std::vector<int64_t> a(5);
  for (int i = 0; i < 5; ++i) a[i] = int64_t(me) * 10 + i + 1;
  g.all_reduce(a.data(), 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(a[i], member_sum * 10 + int64_t(s) * (i + 1)) << "all_reduce i " << i;

  // all_reduce, double max.
  std::vector<double> m(3);
  for (int i = 0; i < 3; ++i) m[i] = me + 0.5 * i;
  g.all_reduce(m.data(), 3, ReduceOp::Max);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(m[i], member_max + 0.5 * i) << "all_reduce max i " << i;

  // all_reduce, float sum over a larger buffer (small integers: exact in float).
  const int nf = 1000;
  std::vector<float> f(nf);
  for (int i = 0; i < nf; ++i) f[i] = float(me + 1 + (i % 7));
  g.all_reduce(f.data(), nf);
  for (int i = 0; i < nf; ++i) {
    if (f[i] != float(member_sum + s * (1 + (i % 7)))) {
      ADD_FAILURE() << "float all_reduce wrong at " << i << ": " << f[i];
      break;
    }
  }

  // iall_reduce, int32 sum, completed through test() and wait().
  std::vector<int32_t> ia(16);
  for (int i = 0; i < 16; ++i) ia[i] = me * 3 + i;
  Request req = g.iall_reduce(ia.data(), 16);
  while (!g.test(req)) std::this_thread::sleep_for(std::chrono::microseconds(5));  // no spinning at 8 ranks
  g.wait(req);  // a no-op on a completed request
  for (int i = 0; i < 16; ++i) EXPECT_EQ(ia[i], int32_t(member_sum * 3 + int64_t(s) * i)) << "iall_reduce i " << i;

  // all_gather: block j comes from group rank j.
  const int k = 3;
  std::vector<int32_t> gs(k), gr(k * s, -1);
  for (int i = 0; i < k; ++i) gs[i] = me * 100 + i;
  g.all_gather(gs.data(), gr.data(), k);
  for (int j = 0; j < s; ++j)
    for (int i = 0; i < k; ++i) EXPECT_EQ(gr[j * k + i], members[j] * 100 + i) << "all_gather block " << j;

  // reduce_scatter: group rank r receives the sum over members of block r.
  const int rc = 2;
  std::vector<double> rs(rc * s), rr(rc, -1);
  for (int b = 0; b < s; ++b)
    for (int i = 0; i < rc; ++i) rs[b * rc + i] = me * 1000.0 + b * 10 + i;
  g.reduce_scatter(rs.data(), rr.data(), rc);
  for (int i = 0; i < rc; ++i)
    EXPECT_EQ(rr[i], member_sum * 1000.0 + s * (g.rank() * 10.0 + i)) << "reduce_scatter i " << i;

  // broadcast from every root in turn.
  for (int root = 0; root < s; ++root) {
    std::vector<int64_t> b(4, -1);
    if (g.rank() == root)
      for (int i = 0; i < 4; ++i) b[i] = int64_t(me) * 7 + i;
    g.broadcast(b.data(), 4, root);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(b[i], int64_t(members[root]) * 7 + i) << "broadcast root " << root;
  }

  // ireduce to the last group rank (only the root's buffer changes), then ibroadcast from it.
  const int last = s - 1;
  std::vector<float> rd(6);
  for (int i = 0; i < 6; ++i) rd[i] = float(me + i);
  std::vector<Request> zero_like{g.ireduce(rd.data(), 6, last)};
  g.wait_all(zero_like);
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(rd[i], g.rank() == last ? float(member_sum + int64_t(s) * i) : float(me + i)) << "ireduce i " << i;
  zero_like = {g.ibroadcast(rd.data(), 6, last)};
  g.wait_all(zero_like);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(rd[i], float(member_sum + int64_t(s) * i)) << "ibroadcast i " << i;

  int64_t p2p_bytes = 0, p2p_calls = 0;
  if (s > 1) {
    const int next = (g.rank() + 1) % s, prev = (g.rank() + s - 1) % s;
    // Non-blocking ring with a message large enough for the rendezvous protocol (256 KiB).
    const int nr = 64 * 1024;
    std::vector<float> out(nr), in(nr, -1.0f);
    for (int i = 0; i < nr; ++i) out[i] = float(me * 10 + (i % 10));
    std::vector<Request> reqs;
    reqs.push_back(g.irecv(in.data(), nr, prev, /*tag=*/7));
    reqs.push_back(g.isend(out.data(), nr, next, /*tag=*/7));
    g.wait_all(reqs);
    for (int i = 0; i < nr; ++i) {
      if (in[i] != float(members[prev] * 10 + (i % 10))) {
        ADD_FAILURE() << "isend/irecv ring wrong at " << i << ": " << in[i];
        break;
      }
    }
    // Blocking ring: even group ranks send first, odd ones receive first (every size here is even).
    ASSERT_EQ(s % 2, 0);
    std::vector<int64_t> bo(4), bi(4, -1);
    for (int i = 0; i < 4; ++i) bo[i] = int64_t(me) * 1000 + i;
    if (g.rank() % 2 == 0) {
      g.send(bo.data(), 4, next, 3);
      g.recv(bi.data(), 4, prev, 3);
    } else {
      g.recv(bi.data(), 4, prev, 3);
      g.send(bo.data(), 4, next, 3);
    }
    for (int i = 0; i < 4; ++i) EXPECT_EQ(bi[i], int64_t(members[prev]) * 1000 + i) << "send/recv ring";
    p2p_bytes = int64_t(nr) * 4 + 4 * 8;
    p2p_calls = 2;
  }

  // Byte counters: the analytic payload of everything above; groups of one rank move nothing.
  const bool moves = s > 1;
  EXPECT_EQ(op_bytes(g, CommOp::AllReduce), moves ? 5 * 8 + 3 * 8 + nf * 4 + 16 * 4 : 0);
  EXPECT_EQ(op_calls(g, CommOp::AllReduce), moves ? 4 : 0);
  EXPECT_EQ(op_bytes(g, CommOp::AllGather), moves ? int64_t(k) * s * 4 : 0);
  EXPECT_EQ(op_calls(g, CommOp::AllGather), moves ? 1 : 0);
  EXPECT_EQ(op_bytes(g, CommOp::ReduceScatter), moves ? int64_t(rc) * s * 8 : 0);
  EXPECT_EQ(op_calls(g, CommOp::ReduceScatter), moves ? 1 : 0);
  EXPECT_EQ(op_bytes(g, CommOp::Broadcast), moves ? int64_t(s) * 4 * 8 + 6 * 4 : 0);
  EXPECT_EQ(op_calls(g, CommOp::Broadcast), moves ? s + 1 : 0);
  EXPECT_EQ(op_bytes(g, CommOp::Reduce), moves ? 6 * 4 : 0);
  EXPECT_EQ(op_calls(g, CommOp::Reduce), moves ? 1 : 0);
  EXPECT_EQ(op_bytes(g, CommOp::Send), p2p_bytes);
  EXPECT_EQ(op_bytes(g, CommOp::Recv), p2p_bytes);
  EXPECT_EQ(op_calls(g, CommOp::Send), p2p_calls);
  EXPECT_EQ(op_calls(g, CommOp::Recv), p2p_calls);
  int64_t total = 0;
  for (int op = 0; op < static_cast<int>(CommOp::kCount); ++op) total += g.counters().bytes[op];
  EXPECT_EQ(g.counters().total_bytes(), total);
  g.reset_counters();
  EXPECT_EQ(g.counters().total_bytes(), 0);
}

// This rank's node name as Slurm or the host reports it: independent of MPI's shared-memory split.
std::string reported_node_name() {
  if (const char* slurm = std::getenv("SLURMD_NODENAME"); slurm && *slurm) return slurm;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return host;
}

// Every rank's node as expected from the reported names: nodes numbered by their lowest world rank,
// local ranks in world-rank order.
struct ExpectedNodes {
  std::vector<int> node, local;
  int num_nodes = 0;
  int local_size(int rank) const { return int(std::count(node.begin(), node.end(), node[size_t(rank)])); }
};
ExpectedNodes expected_nodes() {
  constexpr int kName = 256;
  const int n = world_size();
  std::string mine = reported_node_name();
  mine.resize(kName - 1);
  std::vector<char> all(size_t(n) * kName);
  MPI_Allgather(mine.c_str(), kName, MPI_CHAR, all.data(), kName, MPI_CHAR, MPI_COMM_WORLD);
  ExpectedNodes e;
  std::vector<std::string> names;
  for (int r = 0; r < n; ++r) {
    const std::string name(&all[size_t(r) * kName]);
    const auto it = std::find(names.begin(), names.end(), name);
    e.node.push_back(int(it - names.begin()));
    if (it == names.end()) names.push_back(name);
    e.local.push_back(int(std::count(e.node.begin(), e.node.end() - 1, e.node.back())));
  }
  e.num_nodes = int(names.size());
  return e;
}

// Coordinates, node, groups and collectives of one mesh.
void check_mesh(const MeshConfig& cfg, MpiWait wait) {
  SCOPED_TRACE(::testing::Message() << "tp " << cfg.tp << " pp " << cfg.pp << " dp " << cfg.dp << " order "
                                    << cfg.order << " wait " << to_string(wait));
  const RefLayout ref{cfg.tp, cfg.pp, cfg.dp, cfg.order};
  const int me = world_rank(), n = world_size();
  ParallelMesh mesh(MPI_COMM_WORLD, cfg, wait);
  ASSERT_EQ(mesh.world_rank(), me);
  ASSERT_EQ(mesh.world_size(), n);
  const Coord expect = ref.coord(me);
  EXPECT_EQ(mesh.coord(), expect);
  EXPECT_EQ(mesh.layout().coord_of(me), expect);
  EXPECT_EQ(mesh.is_first_stage(), expect.pp == 0);
  EXPECT_EQ(mesh.is_last_stage(), expect.pp == cfg.pp - 1);
  const ExpectedNodes nodes = expected_nodes();
  EXPECT_EQ(mesh.node().node, nodes.node[size_t(me)]);
  EXPECT_EQ(mesh.node().num_nodes, nodes.num_nodes);
  EXPECT_EQ(mesh.node().local_rank, nodes.local[size_t(me)]);
  EXPECT_EQ(mesh.node().local_size, nodes.local_size(me));
  bool spans = false;  // does any TP group hold ranks of two nodes?
  for (int r = 0; r < n; ++r)
    for (int member : ref.group(r, "tp")) spans = spans || nodes.node[size_t(member)] != nodes.node[size_t(r)];
  EXPECT_EQ(mesh.tp_spans_nodes(), spans);

  EXPECT_EQ(mesh.tp().rank(), expect.tp);
  EXPECT_EQ(mesh.pp().rank(), expect.pp);
  EXPECT_EQ(mesh.dp().rank(), expect.dp);
  std::vector<int> world(n);
  std::iota(world.begin(), world.end(), 0);
  check_collectives(mesh.tp(), ref.group(me, "tp"));
  check_collectives(mesh.pp(), ref.group(me, "pp"));
  check_collectives(mesh.dp(), ref.group(me, "dp"));
  check_collectives(mesh.world(), world);
}

TEST(ParallelMesh, EveryFactorisationAndOrder) {
  int meshes = 0;
  for (MpiWait wait : full_wait_modes()) {
    const auto factorisations = test::factorisations(world_size());
    for (size_t i = 0; i < factorisations.size(); ++i) {
      const auto& f = factorisations[i];
      for (const char* order : orders_to_test(i)) {
        check_mesh(mesh_config(f.tp, f.pp, f.dp, order), wait);
        ++meshes;
      }
    }
  }
  EXPECT_GE(meshes, 2);
}

// Block at every rank count, on one mesh (a smoke test at 4 and 8 ranks, where it spins).
TEST(ParallelMesh, BlockingWaitSmoke) {
  const int n = world_size();
  const int tp = n >= 2 ? 2 : 1;
  check_mesh(mesh_config(tp, 1, n / tp, "tp-dp-pp"), MpiWait::Block);
}

// Each rank's row names its node (as detect_node finds it, tested in test_fake_nodes) and its host:
// Slurm's node name inside a job (fake nodes share one host), else the host name.
TEST(ParallelMesh, DescribeListsEveryRankAndGroup) {
  const int n = world_size();
  const int tp = n >= 2 ? 2 : 1, pp = n >= 4 ? 2 : 1, dp = n / tp / pp;
  const NodeInfo nodes = detect_node(MPI_COMM_WORLD);
  std::vector<int> node_of(size_t(2 * n));
  const int mine[2] = {nodes.node, nodes.local_rank};
  MPI_Allgather(mine, 2, MPI_INT, node_of.data(), 2, MPI_INT, MPI_COMM_WORLD);
  constexpr int kHost = 64;
  char host[kHost] = {};
  const char* slurm = std::getenv("SLURMD_NODENAME");
  if (slurm && *slurm) std::snprintf(host, kHost, "%s", slurm);
  else gethostname(host, kHost - 1);
  std::vector<char> hosts(size_t(n) * kHost);
  MPI_Allgather(host, kHost, MPI_CHAR, hosts.data(), kHost, MPI_CHAR, MPI_COMM_WORLD);
  for (const char* order : {"tp-dp-pp", "pp-dp-tp"}) {
    const MeshConfig cfg = mesh_config(tp, pp, dp, order);
    ParallelMesh mesh(MPI_COMM_WORLD, cfg, MpiWait::Poll);
    const std::string text = mesh.describe();
    if (world_rank() != 0) {
      EXPECT_EQ(text, "");
      continue;
    }
    const RefLayout ref{tp, pp, dp, order};
    EXPECT_NE(text.find(fmt::format("world {} ranks on {} node(s); mesh tp {} x pp {} x dp {}", n, nodes.num_nodes,
                                    tp, pp, dp)),
              std::string::npos)
        << text;
    for (int r = 0; r < n; ++r) {
      const Coord c = ref.coord(r);
      const std::string host(&hosts[size_t(r) * kHost]);
      EXPECT_NE(text.find(fmt::format("{:5d} {:5d} {:6d} {:5d} {:5d} {:5d}  {}\n", r, node_of[2 * r],
                                      node_of[2 * r + 1], c.dp, c.pp, c.tp, host)),
                std::string::npos)
          << "rank " << r << " row missing:\n" << text;
    }
    for (const char* axis : {"tp", "pp", "dp"}) {
      std::set<std::vector<int>> groups;
      for (int r = 0; r < n; ++r) groups.insert(ref.group(r, axis));
      std::string line = std::string(axis == std::string("tp") ? "TP" : axis == std::string("pp") ? "PP" : "DP") +
                         " groups:";
      for (const auto& g : groups) line += fmt::format(" [{}]", fmt::join(g, " "));
      EXPECT_NE(text.find(line + "\n"), std::string::npos) << "expected '" << line << "' in:\n" << text;
    }
  }
}

TEST(ParallelMesh, WrongWorldSizeIsAnErrorOnEveryRank) {
  const int n = world_size();
  EXPECT_THROW(ParallelMesh(MPI_COMM_WORLD, mesh_config(1, 1, n + 1, "tp-dp-pp"), MpiWait::Poll), Error);
  // The world is still usable afterwards.
  int one = 1, sum = 0;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(sum, n);
}

// strict_placement: a TP group of every rank is fine on one node and refused (on every rank) across nodes.
TEST(ParallelMesh, StrictPlacementRefusesOnlyATpGroupAcrossNodes) {
  const int n = world_size();
  if (expected_nodes().num_nodes == 1) {
    EXPECT_NO_THROW({
      ParallelMesh mesh(MPI_COMM_WORLD, mesh_config(n, 1, 1, "dp-pp-tp", /*strict=*/true), MpiWait::Poll);
      EXPECT_FALSE(mesh.tp_spans_nodes());
    });
  } else {
    EXPECT_THROW(ParallelMesh(MPI_COMM_WORLD, mesh_config(n, 1, 1, "dp-pp-tp", /*strict=*/true), MpiWait::Poll),
                 Error);
  }
}

TEST(Group, CommOpNames) {
  EXPECT_STREQ(to_string(CommOp::AllReduce), "all_reduce");
  EXPECT_STREQ(to_string(CommOp::ReduceScatter), "reduce_scatter");
  EXPECT_STREQ(to_string(CommOp::AllGather), "all_gather");
  EXPECT_STREQ(to_string(CommOp::Broadcast), "broadcast");
  EXPECT_STREQ(to_string(CommOp::Send), "send");
  EXPECT_STREQ(to_string(CommOp::Recv), "recv");
  EXPECT_STREQ(to_string(CommOp::Reduce), "reduce");
}

}  // namespace
}  // namespace trident
