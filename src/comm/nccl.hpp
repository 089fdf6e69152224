#pragma once
// The NCCL side of a group (TensorTransport::Nccl): the same members in the same rank order, and a
// communication stream of its own. Every operation is ordered against the compute stream with events:
// the compute stream records, the communication stream waits for that record and runs the operation,
// and a waiter makes the compute stream wait for the operation's completion event. No call waits on
// the host, so the host runs ahead and queues the whole step.
//
// Point-to-point transfers between two ranks go on channels: for each neighbour and direction a 2-rank
// communicator with a stream of its own, made for the pipeline group when the mesh is connected. NCCL
// matches a send and a receive by order and blocks a stream on each until its partner's runs, so one
// stream for every transfer deadlocks a pipeline (an interleaved 1F1B step at pp 2 already: both
// stages send before they receive); with one stream per direction and peer each transfer waits only
// for its own partner, as with MPI (tests/comm/test_pipeline_on_nccl.cpp simulates every schedule).
// The channels are connected when they are made (NCCL's first transfer on a connection blocks the host
// until the peer's first one), so that no later send or receive waits on the host.
// Transfers to the rank itself (a group of one) are held and go as one NCCL group on the main
// communicator.
//
// A hung operation or an asynchronous NCCL error ends the job through the watchdog (comm/watchdog.hpp),
// which aborts the communicators first. The unique id travels over MPI: no shared file system or TCP
// store. Implemented in the CUDA module (kernels/cuda/nccl_comm.cpp): cuda_module().make_nccl makes
// one, and throws a clear error in a build without CUDA.
#include <cstdint>

#include "comm/group.hpp"

namespace trident {

class NcclComm {
 public:
  // Made collectively over the owner's MPI communicator: group rank 0 creates the unique id and
  // broadcasts it over MPI. The compute stream is the cudaStream_t the backend's kernels run on;
  // point_to_point makes the channels to and from the neighbouring group ranks (r - 1, r + 1).
  virtual ~NcclComm() = default;

  // Each queues the operation after the compute stream's work so far and returns the slot of its
  // completion. dtype: 0 float, 1 double, 2 int32, 3 int64.
  virtual int all_reduce(void* data, int64_t n, int dtype, ReduceOp op) = 0;
  virtual int reduce_scatter(const void* send, void* recv, int64_t recv_count, int dtype) = 0;
  virtual int all_gather(const void* send, void* recv, int64_t send_count, int dtype) = 0;
  virtual int broadcast(void* data, int64_t n, int dtype, int root) = 0;  // in place
  virtual int reduce(void* data, int64_t n, int dtype, int root) = 0;     // sum into root's data, in place
  virtual int send(const void* data, int64_t n, int dtype, int peer) = 0;
  virtual int recv(void* data, int64_t n, int dtype, int peer) = 0;
  // The compute stream waits for the slot's operation; the slot is free again.
  virtual void wait(int slot) = 0;
  // The slot's operation has completed on the device (the slot stays taken until wait).
  virtual bool done(int slot) = 0;
};

}  // namespace trident
