#pragma once
// Agreement across the ranks of a collective checkpoint function (internal): every rank learns of
// any rank's error before the next collective step, so that no rank is left waiting in one.
#include <mpi.h>

#include <string>

namespace trident::ckpt {

int comm_rank(MPI_Comm c);
int comm_size(MPI_Comm c);

// Every rank learns whether any rank failed; all throw CheckpointError with the message of the
// lowest failing rank. Keeps collective code from leaving ranks behind in a collective.
void agree(MPI_Comm comm, const std::string& local_error);

// Runs f on rank 0 only; its CheckpointError/Error (or none) is agreed by every rank.
template <class F>
void on_root(MPI_Comm comm, F f) {
  std::string err;
  if (comm_rank(comm) == 0) {
    try {
      f();
    } catch (const std::exception& e) {
      err = e.what();
      if (err.empty()) err = "unknown error";
    }
  }
  agree(comm, err);
}

// Rank 0's string on every rank.
void bcast_string(std::string& s, MPI_Comm comm);

}  // namespace trident::ckpt
