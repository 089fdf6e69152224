#pragma once
// What `train` and `topology` say about the Slurm job they run in, before anything else.
#include "core/config.hpp"

namespace trident {

// Throws Error when srun started several tasks but MPI sees a world of one rank each (`srun --mpi=none`,
// or an MPI plugin that does not match this MPI): every task would train alone. Call before the deck
// is checked against the world size, so that this hint replaces N "the job has 1 ranks" errors.
void check_mpi_matches_slurm(int world_size);

// Logs the Slurm job (rank 0; the time limit asked of squeue) and, without checkpoint.dir, that a
// time limit or preemption will save nothing. Nothing outside Slurm.
void log_slurm_job(const Config& cfg);

}  // namespace trident
