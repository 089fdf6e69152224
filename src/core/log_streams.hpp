#pragma once
// Where log lines go (core/log.hpp): stderr by default; for the commands whose output is their log
// (train, eval, data prepare), information to stdout and warnings and errors to stderr, as HPC job
// logs (Slurm's --output and --error) expect.
namespace trident::log {

// Call after log::init.
void use_job_log_streams();

}  // namespace trident::log
