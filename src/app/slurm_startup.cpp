#include "app/slurm_startup.hpp"

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/slurm_env.hpp"

namespace trident {

void check_mpi_matches_slurm(int world_size) {
  const auto job = slurm_job();
  if (!job || world_size != 1 || job->step_tasks <= 1) return;
  throw Error(fmt::format(
      "Slurm started {} tasks but MPI sees a world of 1 rank in each: srun did not connect them through an MPI "
      "plugin (srun --mpi=none, or MpiDefault=none in slurm.conf). Launch with `srun --mpi=pmi2` (or "
      "--mpi=pmix where the site's MPI supports it); `srun --mpi=list` shows the plugins",
      job->step_tasks));
}

void log_slurm_job(const Config& cfg) {
  const auto job = slurm_job();
  if (!job) return;
  if (log::is_root()) log::info("{}", describe(*job, job->end_time ? "" : slurm_time_left(*job)));
  if (cfg.checkpoint.dir.empty())
    log::info("warning: [checkpoint] dir is empty: a time limit, scancel or preemption of this Slurm job saves "
              "nothing (set checkpoint.dir to checkpoint on SIGUSR1/SIGTERM and resume on requeue)");
}

}  // namespace trident
