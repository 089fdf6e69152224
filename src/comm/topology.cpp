#include "comm/topology.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace trident {

MeshLayout::MeshLayout(const MeshConfig& mesh) : tp_(mesh.tp), pp_(mesh.pp), dp_(mesh.dp) {
  TRIDENT_CHECK(tp_ >= 1 && pp_ >= 1 && dp_ >= 1, "mesh tp {}, pp {}, dp {}: every size must be at least 1", tp_, pp_, dp_);
  // mesh.order names the axes fastest-varying first, e.g. "tp-dp-pp": rank = tp + tp_size*(dp + dp_size*pp).
  const std::string& o = mesh.order;
  TRIDENT_CHECK(o.size() == 8 && o[2] == '-' && o[5] == '-', "mesh.order '{}' is not of the form a-b-c", o);
  int stride = 1;
  for (int i = 0; i < 3; ++i) {
    const std::string axis = o.substr(3 * i, 2);
    if (axis == "tp") stride_tp_ = stride, stride *= tp_;
    else if (axis == "pp") stride_pp_ = stride, stride *= pp_;
    else if (axis == "dp") stride_dp_ = stride, stride *= dp_;
    else TRIDENT_FAIL("mesh.order '{}' names an unknown axis '{}'", o, axis);
  }
  // A repeated axis ("tp-tp-pp") would leave another axis without a stride.
  TRIDENT_CHECK(stride_tp_ > 0 && stride_pp_ > 0 && stride_dp_ > 0, "mesh.order '{}' is not a permutation of tp, dp, pp", o);
}

Coord MeshLayout::coord_of(int rank) const {
  TRIDENT_CHECK(rank >= 0 && rank < world_size(), "rank {} outside a mesh of {} ranks", rank, world_size());
  return Coord{(rank / stride_dp_) % dp_, (rank / stride_pp_) % pp_, (rank / stride_tp_) % tp_};
}

int MeshLayout::rank_of(const Coord& c) const { return c.dp * stride_dp_ + c.pp * stride_pp_ + c.tp * stride_tp_; }

std::vector<int> MeshLayout::tp_group(int rank) const {
  Coord c = coord_of(rank);
  std::vector<int> g;
  for (c.tp = 0; c.tp < tp_; ++c.tp) g.push_back(rank_of(c));
  return g;
}

std::vector<int> MeshLayout::pp_group(int rank) const {
  Coord c = coord_of(rank);
  std::vector<int> g;
  for (c.pp = 0; c.pp < pp_; ++c.pp) g.push_back(rank_of(c));
  return g;
}

std::vector<int> MeshLayout::dp_group(int rank) const {
  Coord c = coord_of(rank);
  std::vector<int> g;
  for (c.dp = 0; c.dp < dp_; ++c.dp) g.push_back(rank_of(c));
  return g;
}

NodeInfo detect_node(MPI_Comm world) {
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  MPI_Comm node_comm;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node_comm);
  NodeInfo info;
  MPI_Comm_rank(node_comm, &info.local_rank);
  MPI_Comm_size(node_comm, &info.local_size);
  // Node leaders (local rank 0) number the nodes in order of their world rank.
  MPI_Comm leaders;
  MPI_Comm_split(world, info.local_rank == 0 ? 0 : MPI_UNDEFINED, rank, &leaders);
  if (leaders != MPI_COMM_NULL) {
    MPI_Comm_rank(leaders, &info.node);
    MPI_Comm_size(leaders, &info.num_nodes);
    MPI_Comm_free(&leaders);
  }
  MPI_Bcast(&info.node, 1, MPI_INT, 0, node_comm);
  MPI_Bcast(&info.num_nodes, 1, MPI_INT, 0, node_comm);
  MPI_Comm_free(&node_comm);
  return info;
}

}  // namespace trident
