#pragma once
// Which GPU a rank takes, from what it can see. Pure logic (no CUDA call), so that every case is
// tested without a device: the CUDA backend and the NCCL attachment both ask it.
//
// A rank sees the GPUs that CUDA_VISIBLE_DEVICES (or Slurm's per-task binding, which sets it) leaves
// visible. With one visible GPU per rank (`srun --gpus-per-task=1`) every rank takes its GPU 0; with a
// node's GPUs all visible, local rank r takes GPU r.
#include <string>

namespace trident {

struct GpuChoice {
  int index = 0;        // among the visible GPUs (the argument of cudaSetDevice)
  bool shared = false;  // other ranks of this node take the same visible GPU
};

// local_rank, local_size: this rank's index among the ranks of its node and their number; visible:
// the GPUs this process can see; allow_sharing: several ranks may use one GPU (host-staged MPI
// communication; NCCL refuses it). Throws trident::Error naming the counts and what to change.
GpuChoice choose_gpu(int local_rank, int local_size, int visible, bool allow_sharing);

// "CUDA_VISIBLE_DEVICES=0,1" or "CUDA_VISIBLE_DEVICES unset", for messages.
std::string visible_devices_note();

}  // namespace trident
