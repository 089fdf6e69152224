#pragma once
// When the NCCL transport issues transfers between a rank and itself (a group of one; comm/nccl.hpp):
// NCCL runs a send to self only with its receive in the same NCCL group (ncclGroupStart/End), so they
// are held on the host and issued together:
//   * a send goes out at once, with every transfer held before it;
//   * a receive is held until it is waited for (or a send comes); the wait issues the held transfers up
//     to and including it;
//   * before a collective on the same communicator, everything held goes out.
// (Between two ranks this is not enough, a single stream deadlocks a pipeline: NCCL uses channels
// there; tests/comm/test_pipeline_on_nccl.cpp shows both.) Pure bookkeeping, no CUDA: each call
// returns the transfers to issue now, as one group, in posting order.
#include <cstdint>
#include <vector>

namespace trident {

struct Transfer {
  bool send = false;
  int slot = -1;          // the operation's completion slot (NcclComm)
  void* data = nullptr;
  int64_t count = 0;
  int dtype = 0;
  int peer = -1;
};

class HeldTransfers {
 public:
  std::vector<Transfer> post(const Transfer& t);
  std::vector<Transfer> wait_for(int slot);  // none when `slot` was issued already
  std::vector<Transfer> all();
  bool holds(int slot) const;

 private:
  std::vector<Transfer> held_;
};

}  // namespace trident
