#pragma once
// SIGUSR1 from the start of the process. Slurm's `--signal=USR1@<seconds>` may arrive while the job is
// still starting (MPI_Init, loading the deck, building the model), before TrainingCheckpoints installs
// its own handler; without this one the signal's default action would end the process. The trainer
// turns what was counted here into a checkpoint request, or a log line when checkpoints are off.
namespace trident {

// Installs a handler that counts SIGUSR1 (async-signal-safe). Call first thing in main.
void install_usr1_counter();

// Signals counted so far.
long usr1_count();

}  // namespace trident
