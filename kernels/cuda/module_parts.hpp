#pragma once
// The pieces of the CUDA module that kernels/cuda/module.cpp puts in its table (cuda_module.hpp),
// one source file each. Only the module's own sources include this.
#include <mpi.h>

#include <memory>

namespace trident {
class ComputeBackend;
class DeviceCopies;
class Group;
class NcclComm;
}  // namespace trident

namespace trident::cuda {

// cuda_backend.cpp: binds this rank's GPU (gpu_binding.hpp) and makes its Kernels.
std::unique_ptr<ComputeBackend> start_backend(int local_rank, int local_size, bool share_gpus);
// cuda_copies.cpp
std::unique_ptr<DeviceCopies> make_copies(void* compute_stream);
// nccl_comm.cpp
std::unique_ptr<NcclComm> make_nccl(MPI_Comm comm, void* compute_stream, const Group& owner, bool point_to_point);

}  // namespace trident::cuda
