#pragma once
// The parallel mesh of a run: this rank's coordinates and node, and its TP, PP and DP groups
// (TP innermost by default, so a TP group is a set of neighbouring ranks inside one node).
#include <memory>
#include <string>

#include "comm/group.hpp"
#include "comm/topology.hpp"
#include "kernels.hpp"

namespace trident {

class ParallelMesh {
 public:
  // Collective over `world`. The mesh's tp*pp*dp must equal the world size (the deck checks it).
  // A TP group spanning nodes is a warning, or an error with mesh.strict_placement.
  ParallelMesh(MPI_Comm world, const MeshConfig& mesh, MpiWait wait);

  const MeshLayout& layout() const { return layout_; }
  const NodeInfo& node() const { return node_; }
  const Coord& coord() const { return coord_; }
  int world_rank() const { return world_.rank(); }
  int world_size() const { return world_.size(); }

  Group& world() { return world_; }
  Group& tp() { return *tp_; }
  Group& pp() { return *pp_; }
  Group& dp() { return *dp_; }
  // First and last pipeline stage of this rank's pipeline (same dp, tp), which both hold the tied
  // token embedding; null on other stages and when pp = 1.
  Group* embedding() { return embedding_.get(); }

  bool is_first_stage() const { return coord_.pp == 0; }
  bool is_last_stage() const { return coord_.pp == layout_.pp_size() - 1; }

  // True when this rank's TP group has members on more than one node.
  bool tp_spans_nodes() const { return tp_spans_nodes_; }

  // Sets how every group moves tensors in `kernels`' memory (Group's TensorTransport), once, after the
  // backend has bound this rank's GPU: host memory goes over MPI; GPU memory over NCCL (comm = nccl)
  // or staged through page-locked host memory over MPI (comm = mpi). Collective over the world.
  void connect_tensors(Comm comm, Kernels& kernels);
  TensorTransport tensor_transport() const { return tp_->transport(); }

  // Human-readable description of every rank (node, coordinates, host: Slurm's node name inside a job,
  // else the host name) and every group (gathered on world rank 0; "" elsewhere).
  std::string describe();

 private:
  MeshLayout layout_;
  NodeInfo node_;
  Coord coord_;
  Group world_;
  std::unique_ptr<Group> tp_, pp_, dp_, embedding_;
  bool tp_spans_nodes_ = false;
};

}  // namespace trident
