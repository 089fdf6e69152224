#include "checkpoint/collective.hpp"

#include <climits>
#include <cstdint>

#include "checkpoint/checkpoint_error.hpp"

namespace trident::ckpt {

int comm_rank(MPI_Comm c) {
  int r = 0;
  MPI_Comm_rank(c, &r);
  return r;
}
int comm_size(MPI_Comm c) {
  int s = 1;
  MPI_Comm_size(c, &s);
  return s;
}

// Every rank learns whether any rank failed; all throw CheckpointError with the message of the
// lowest failing rank. Keeps collective code from leaving ranks behind in a collective.
void agree(MPI_Comm comm, const std::string& local_error) {
  int mine = local_error.empty() ? INT_MAX : comm_rank(comm), first = INT_MAX;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == INT_MAX) return;
  int64_t len = comm_rank(comm) == first ? int64_t(local_error.size()) : 0;
  MPI_Bcast(&len, 1, MPI_INT64_T, first, comm);
  std::string msg(size_t(len), '\0');
  if (comm_rank(comm) == first) msg = local_error;
  MPI_Bcast(msg.data(), int(len), MPI_CHAR, first, comm);
  throw CheckpointError(msg);
}

void bcast_string(std::string& s, MPI_Comm comm) {
  int64_t n = int64_t(s.size());
  MPI_Bcast(&n, 1, MPI_INT64_T, 0, comm);
  s.resize(size_t(n));
  MPI_Bcast(s.data(), int(n), MPI_CHAR, 0, comm);
}

}  // namespace trident::ckpt
