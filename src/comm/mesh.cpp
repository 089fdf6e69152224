#include "comm/mesh.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>

#include "core/error.hpp"
#include "core/log.hpp"

#include "comm/layout_text.hpp"
#include "comm/staging.hpp"
#include "cuda_module.hpp"

namespace trident {
namespace {

MPI_Comm dup(MPI_Comm c) {
  MPI_Comm d;
  MPI_Comm_dup(c, &d);
  return d;
}

// 0..size-1: the world group's members in world-rank order.
std::vector<int> all_ranks(MPI_Comm c) {
  int n = 1;
  MPI_Comm_size(c, &n);
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

int rank_in(MPI_Comm c) {
  int r = 0;
  MPI_Comm_rank(c, &r);
  return r;
}

// Splits `world` into the groups `members(rank)` describes; members are ordered along the axis.
std::unique_ptr<Group> make_group(const char* name, MPI_Comm world, std::vector<int> members, MpiWait wait) {
  const int me = rank_in(world);
  int position = 0;
  while (members[position] != me) ++position;
  MPI_Comm comm;
  MPI_Comm_split(world, /*color=*/members[0], /*key=*/position, &comm);
  return std::make_unique<Group>(name, comm, std::move(members), wait);
}

// The name users know this rank's node by: Slurm's node name (SLURMD_NODENAME) inside a job, else
// the host name. Several Slurm nodes may share a host (a test cluster), hence Slurm's name first.
std::string node_name() {
  if (const char* slurm = std::getenv("SLURMD_NODENAME"); slurm && *slurm) return slurm;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) return "?";
  return host;
}

}  // namespace

ParallelMesh::ParallelMesh(MPI_Comm world, const MeshConfig& mesh, MpiWait wait)
    : layout_(mesh), node_(detect_node(world)), world_("world", dup(world), all_ranks(world), wait) {
  TRIDENT_CHECK(layout_.world_size() == world_.size(), "mesh tp*pp*dp = {} but the world has {} ranks",
                layout_.world_size(), world_.size());
  const int me = world_.rank();
  coord_ = layout_.coord_of(me);
  tp_ = make_group("tp", world_.mpi_comm(), layout_.tp_group(me), wait);
  pp_ = make_group("pp", world_.mpi_comm(), layout_.pp_group(me), wait);
  dp_ = make_group("dp", world_.mpi_comm(), layout_.dp_group(me), wait);
  // The embedding group: every rank takes part in the split, members are the two edge stages.
  const int last = layout_.pp_size() - 1;
  const bool edge = last > 0 && (coord_.pp == 0 || coord_.pp == last);
  Coord first_stage = coord_, last_stage = coord_;
  first_stage.pp = 0;
  last_stage.pp = last;
  MPI_Comm emb;
  MPI_Comm_split(world_.mpi_comm(), edge ? layout_.rank_of(first_stage) : MPI_UNDEFINED, coord_.pp, &emb);
  if (emb != MPI_COMM_NULL)
    embedding_ = std::make_unique<Group>(
        "embedding", emb, std::vector<int>{layout_.rank_of(first_stage), layout_.rank_of(last_stage)}, wait);

  // TP exchanges activations every layer: it needs the intra-node links.
  int highest = node_.node, minus_lowest = -node_.node;
  tp_->all_reduce_host(&highest, 1, ReduceOp::Max);
  tp_->all_reduce_host(&minus_lowest, 1, ReduceOp::Max);
  tp_spans_nodes_ = highest != -minus_lowest;
  int any_span = tp_spans_nodes_ ? 1 : 0;
  world_.all_reduce_host(&any_span, 1, ReduceOp::Max);
  if (any_span) {
    const std::string what = fmt::format(
        "a TP group spans nodes (tp = {}, {} ranks per node on {} nodes, order {}): tensor parallelism "
        "will run over the inter-node network; keep tp within a node and tp first in mesh.order",
        mesh.tp, node_.local_size, node_.num_nodes, mesh.order);
    if (mesh.strict_placement) {
      // Every rank throws the same error; run_or_abort ends the job once.
      throw Error(what + " (error because mesh.strict_placement = true)");
    }
    if (me == 0) log::warn("{}", what);
  }
}

void ParallelMesh::connect_tensors(Comm comm, Kernels& kernels) {
  // GPU Kernels come from the CUDA module: while it is not loaded, these are host Kernels (and a CPU
  // run does not load it to learn that).
  CudaModule* cuda = loaded_cuda_module();
  void* stream = cuda ? cuda->native_stream(kernels) : nullptr;
  if (!stream) {  // host memory: every group keeps MPI
    TRIDENT_CHECK(comm == Comm::Mpi, "runtime.comm = \"nccl\" needs runtime.backend = \"cuda\"");
    return;
  }
  for (Group* g : {tp_.get(), pp_.get(), dp_.get(), embedding_.get()}) {
    if (!g) continue;
    if (comm == Comm::Nccl)
      g->use_nccl(stream, /*point_to_point=*/g == pp_.get());
    else
      g->use_staging(cuda->make_copies(stream));
  }
  // The world group carries host values only; no NCCL communicator over every rank is made for it
  // (its set-up costs grow with the job), and a tensor sent through it would be staged.
  world_.use_staging(cuda->make_copies(stream));
}

std::string ParallelMesh::describe() {
  const int n = world_.size();
  std::vector<int> mine = {node_.node, node_.local_rank, coord_.dp, coord_.pp, coord_.tp};
  std::vector<int> all(n * 5);
  world_.all_gather_host(mine.data(), all.data(), 5);
  constexpr int kName = 64;
  std::string name = node_name();
  name.resize(kName - 1);
  std::vector<char> names(size_t(n) * kName);
  MPI_Allgather(name.c_str(), kName, MPI_CHAR, names.data(), kName, MPI_CHAR, world_.mpi_comm());
  if (world_.rank() != 0) return "";
  std::ostringstream os;
  os << fmt::format("world {} ranks on {} node(s); mesh tp {} x pp {} x dp {}\n", n, node_.num_nodes,
                    layout_.tp_size(), layout_.pp_size(), layout_.dp_size());
  os << " rank  node  local    dp    pp    tp  host\n";
  for (int r = 0; r < n; ++r) {
    const int* v = &all[5 * r];
    os << fmt::format("{:5d} {:5d} {:6d} {:5d} {:5d} {:5d}  {}\n", r, v[0], v[1], v[2], v[3], v[4],
                      std::string(&names[size_t(r) * kName]));
  }
  os << describe_groups(layout_);
  return os.str();
}

}  // namespace trident
