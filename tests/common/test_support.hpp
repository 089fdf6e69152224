#pragma once
// Helpers shared by the test suites.
#include <mpi.h>

#include <string>
#include <vector>

namespace trident::test {

int world_rank();
int world_size();

// Runs a shell command, returns its exit status and fills `output` with stdout+stderr.
int run_command(const std::string& command, std::string* output);

// A command prefix that removes the PMI variables of the test's own MPI job, so that a child
// program (trident, or mpiexec) starts a fresh job instead of joining the parent's.
std::string without_parent_mpi_env();

// The mpiexec command for a job that a test starts itself (a trident run, a helper program). Inside a
// Slurm allocation of several nodes (jobs/ctest_allocation.sh), hydra would launch through Slurm and
// spread the ranks over the allocation's nodes, where the test's deck and temporary files do not exist;
// there the job is launched on this host (hydra's fork launcher; with a hosts file of its own the test
// names the hosts, otherwise this host). Elsewhere it is plain mpiexec.
std::string local_mpiexec(bool own_hosts_file = false);

// Path of the trident executable built with the tests.
std::string trident_binary();

// A fresh temporary directory (removed by the caller or left for inspection in /tmp).
std::string make_temp_dir(const std::string& prefix);

// Writes text to a file, creating parent directories.
void write_file(const std::string& path, const std::string& text);

// Why /usr/bin/python3 cannot import `modules` (empty when it can). Collective over MPI_COMM_WORLD: rank 0
// tries the import and every rank gets its verdict, so a test that stops on it stops on all ranks together.
// `make test` installs these modules, so a test that needs them fails (never skips) without them.
std::string missing_python_modules(const std::vector<std::string>& modules);

// The only skip outside the `gpu` and `slurm` labels: a case that does not apply at this rank count or on
// this backend. The test main fails any other skip (see mpi_gtest_main.cpp).
inline constexpr const char* kNotApplicable = "not applicable: ";

}  // namespace trident::test

// Skips a case that does not apply here (a rank count, a backend). Every rank must decide alike.
#define TRIDENT_SKIP_NOT_APPLICABLE(reason) GTEST_SKIP() << ::trident::test::kNotApplicable << reason

// Skips the current test unless the world has exactly n ranks (tests registered at several counts).
#define TRIDENT_REQUIRE_RANKS(n)                                                                \
  do {                                                                                          \
    if (::trident::test::world_size() != (n)) TRIDENT_SKIP_NOT_APPLICABLE("needs " << (n) << " ranks"); \
  } while (0)
