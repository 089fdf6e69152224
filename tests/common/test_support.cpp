#include "common/test_support.hpp"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <sys/wait.h>

namespace trident::test {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

int run_command(const std::string& command, std::string* output) {
  std::string full = command + " 2>&1";
  FILE* pipe = popen(full.c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed: " + command);
  std::array<char, 4096> buf{};
  std::string out;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  int status = pclose(pipe);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string trident_binary() { return TRIDENT_BINARY; }

std::string without_parent_mpi_env() {
  return "env -u PMI_FD -u PMI_RANK -u PMI_SIZE -u PMI_PORT -u PMI_ID -u MPI_LOCALNRANKS -u MPI_LOCALRANKID";
}

std::string local_mpiexec(bool own_hosts_file) {
  const char* nodes = std::getenv("SLURM_JOB_NUM_NODES");
  std::string cmd = TRIDENT_MPIEXEC;
  if (nodes && std::atoi(nodes) > 1) cmd += own_hosts_file ? " -launcher fork" : " -launcher fork -hosts localhost";
  return cmd;
}

std::string make_temp_dir(const std::string& prefix) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed for " + tmpl);
  return tmpl;
}

void write_file(const std::string& path, const std::string& text) {
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream f(path, std::ios::binary);
  f << text;
  if (!f) throw std::runtime_error("cannot write " + path);
}

std::string missing_python_modules(const std::vector<std::string>& modules) {
  std::string why;
  if (world_rank() == 0) {
    std::string imports;
    for (const auto& m : modules) imports += (imports.empty() ? "" : ", ") + m;
    std::string out;
    if (run_command("/usr/bin/python3 -c 'import " + imports + "'", &out) != 0) {
      why = "/usr/bin/python3 cannot import " + imports + " (scripts/install-deps.sh installs them): " + out;
    }
  }
  int n = static_cast<int>(why.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
  why.resize(static_cast<size_t>(n));
  MPI_Bcast(why.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
  return why;
}

}  // namespace trident::test
