#pragma once
// What Slurm tells a job through its environment: job id, array index, nodes, tasks, restart count,
// time limit. Logged at start-up and stamped on the metrics; never used for ranks, which always come
// from MPI (under `mpiexec` inside an allocation every task sees SLURM_PROCID=0).
#include <cstdint>
#include <optional>
#include <string>

namespace trident {

struct SlurmJob {
  std::string job_id;               // SLURM_JOB_ID
  std::string array_task_id;        // SLURM_ARRAY_TASK_ID ("" outside an array)
  int num_nodes = 0;                // SLURM_JOB_NUM_NODES
  std::string tasks_per_node;       // SLURM_NTASKS_PER_NODE, else SLURM_TASKS_PER_NODE ("2(x4)")
  int step_tasks = 0;               // SLURM_STEP_NUM_TASKS, else SLURM_NTASKS: tasks srun started
  int restart_count = 0;            // SLURM_RESTART_COUNT (unset on the first run: 0)
  std::optional<int64_t> end_time;  // SLURM_JOB_END_TIME (Unix seconds) when Slurm sets it
};

// The job this process runs in; nullopt outside Slurm (no SLURM_JOB_ID).
std::optional<SlurmJob> slurm_job();

// One line for the log: "Slurm job 42 (array task 3), 4 node(s), 2 task(s) per node, restart 1, ...".
// time_limit: what `squeue` reports as left ("" when unknown).
std::string describe(const SlurmJob& job, const std::string& time_left);

// Time left of the job as `squeue -h -j ID -o %L` prints it ("1:02:03", "UNLIMITED"); "" when squeue
// is not there or fails. Runs a process: call on one rank.
std::string slurm_time_left(const SlurmJob& job);

// Identity of this run for the metrics: the Slurm job id (with the array index), or the start time and
// process id outside Slurm; and the restart count.
struct RunIdentity {
  std::string run_id;
  int restart = 0;
};
RunIdentity run_identity();

// Seconds since the Unix epoch, for records read alongside other clocks.
double wall_clock_s();

}  // namespace trident
