#include "core/slurm_env.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

namespace trident {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

int env_int(const char* name) {
  const std::string v = env(name);
  return v.empty() ? 0 : std::atoi(v.c_str());
}

}  // namespace

std::optional<SlurmJob> slurm_job() {
  SlurmJob j;
  j.job_id = env("SLURM_JOB_ID");
  if (j.job_id.empty()) return std::nullopt;
  j.array_task_id = env("SLURM_ARRAY_TASK_ID");
  j.num_nodes = env_int("SLURM_JOB_NUM_NODES");
  j.tasks_per_node = env("SLURM_NTASKS_PER_NODE");
  if (j.tasks_per_node.empty()) j.tasks_per_node = env("SLURM_TASKS_PER_NODE");
  j.step_tasks = env_int("SLURM_STEP_NUM_TASKS");
  if (j.step_tasks == 0) j.step_tasks = env_int("SLURM_NTASKS");
  j.restart_count = env_int("SLURM_RESTART_COUNT");
  const std::string end = env("SLURM_JOB_END_TIME");
  if (!end.empty()) j.end_time = std::atoll(end.c_str());
  return j;
}

std::string describe(const SlurmJob& j, const std::string& time_left) {
  std::string s = fmt::format("Slurm job {}", j.job_id);
  if (!j.array_task_id.empty()) s += fmt::format(" (array task {})", j.array_task_id);
  s += fmt::format(", {} node(s), tasks per node {}, {} task(s) in this step, restart count {}", j.num_nodes,
                   j.tasks_per_node.empty() ? "?" : j.tasks_per_node, j.step_tasks, j.restart_count);
  if (j.end_time) s += fmt::format(", ends at Unix time {} ({:.0f} s from now)", *j.end_time, double(*j.end_time) - wall_clock_s());
  else if (!time_left.empty()) s += fmt::format(", time left {}", time_left);
  else s += ", time limit unknown";
  return s;
}

std::string slurm_time_left(const SlurmJob& job) {
  if (job.job_id.empty()) return "";
  const std::string cmd = fmt::format("squeue -h -j {} -o %L 2>/dev/null", job.job_id);
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return "";
  char buf[64] = {};
  const bool got = std::fgets(buf, sizeof buf, p) != nullptr;
  ::pclose(p);
  std::string s = got ? buf : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

RunIdentity run_identity() {
  RunIdentity r;
  if (const auto job = slurm_job()) {
    r.run_id = job->array_task_id.empty() ? job->job_id : job->job_id + "_" + job->array_task_id;
    r.restart = job->restart_count;
  } else {
    r.run_id = fmt::format("{:.0f}-{}", wall_clock_s(), ::getpid());
  }
  return r;
}

double wall_clock_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace trident
