#pragma once
// Refusing two ranks of one node on one GPU, found by comparing the GPUs' UUIDs: with per-task GPU
// binding every rank sees "GPU 0", so indices cannot tell whether ranks share a device.
#include <mpi.h>

#include <string>

#include "comm/topology.hpp"

namespace trident {

// Collective over world: every rank passes the node it is on and the UUID of the GPU it bound.
// Throws trident::Error on every rank, naming the ranks, the node and the GPU, when two ranks of a
// node share a GPU and allow_sharing is false (NCCL refuses two ranks on one device).
void check_gpu_sharing(MPI_Comm world, const NodeInfo& node, const std::string& gpu_uuid, bool allow_sharing);

}  // namespace trident
