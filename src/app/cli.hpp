#pragma once
#include "core/mpi_start.hpp"
namespace trident {
// The command line: trident train|check|topology|plan|ckpt ... (see --help). main passes its build's MPI
// thread level (TRIDENT_BUILD_MPI_THREADS).
int cli_main(int argc, char** argv, MpiThreads mpi_threads);
}  // namespace trident
