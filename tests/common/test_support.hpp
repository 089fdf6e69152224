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

// Path of the trident executable built with the tests.
std::string trident_binary();

// A fresh temporary directory (removed by the caller or left for inspection in /tmp).
std::string make_temp_dir(const std::string& prefix);

// Writes text to a file, creating parent directories.
void write_file(const std::string& path, const std::string& text);

}  // namespace trident::test

// Skips the current test unless the world has exactly n ranks (tests registered at several counts).
#define TRIDENT_REQUIRE_RANKS(n)                                                         \
  do {                                                                                   \
    if (::trident::test::world_size() != (n)) GTEST_SKIP() << "needs " << (n) << " ranks"; \
  } while (0)
