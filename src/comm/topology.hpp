#pragma once
// Rank layout: world rank <-> (dp, pp, tp) coordinates by mesh.order, and which node each rank is on.
// The coordinate maths is pure (testable without MPI); node detection asks MPI which ranks share memory.
#include <mpi.h>

#include <string>
#include <vector>

#include "core/config.hpp"

namespace trident {

struct Coord {
  int dp = 0, pp = 0, tp = 0;
  bool operator==(const Coord& o) const { return dp == o.dp && pp == o.pp && tp == o.tp; }
};

// Pure layout maths for a mesh of tp*pp*dp ranks.
class MeshLayout {
 public:
  explicit MeshLayout(const MeshConfig& mesh);
  int world_size() const { return tp_ * pp_ * dp_; }
  int tp_size() const { return tp_; }
  int pp_size() const { return pp_; }
  int dp_size() const { return dp_; }
  Coord coord_of(int rank) const;
  int rank_of(const Coord& c) const;
  // World ranks of the groups that contain `rank`, ordered by their coordinate along the group's axis.
  std::vector<int> tp_group(int rank) const;
  std::vector<int> pp_group(int rank) const;
  std::vector<int> dp_group(int rank) const;

 private:
  int tp_, pp_, dp_;
  int stride_tp_ = 0, stride_pp_ = 0, stride_dp_ = 0;  // rank distance between neighbours along each axis
};

// Which node a rank is on, found with MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), not hostnames.
struct NodeInfo {
  int node = 0;         // 0..num_nodes-1, numbered by the lowest world rank on each node
  int num_nodes = 1;
  int local_rank = 0;   // rank within the node (picks the GPU in a CUDA run)
  int local_size = 1;
};
NodeInfo detect_node(MPI_Comm world);

}  // namespace trident
