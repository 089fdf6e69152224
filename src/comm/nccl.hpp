#pragma once
// NCCL mirror of an MPI group: same members, same rank order. CUDA builds only; elsewhere every
// entry point throws a clear error.
#include <mpi.h>

#include <cstdint>
#include <memory>

#include "comm/group.hpp"

namespace trident {

class NcclComm {
 public:
  // Collective over `comm`: group rank 0 creates the unique id and broadcasts it over MPI.
  explicit NcclComm(MPI_Comm comm);
  ~NcclComm();
  // dtype: 0 float, 1 double, 2 int32, 3 int64
  void all_reduce(void* data, int64_t n, int dtype, ReduceOp op);
  void reduce_scatter(const void* send, void* recv, int64_t recv_count, int dtype);
  void all_gather(const void* send, void* recv, int64_t send_count, int dtype);
  void broadcast(void* data, int64_t n, int dtype, int root);
  void send(const void* data, int64_t n, int dtype, int peer);
  void recv(void* data, int64_t n, int dtype, int peer);
  void synchronize();

  static bool is_device_pointer(const void* p);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trident
