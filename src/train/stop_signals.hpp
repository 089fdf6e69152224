#pragma once
// SIGUSR1 and SIGTERM: Slurm's "time is nearly up" (`--signal=USR1@N`, `scancel --signal=USR1`) and
// "stop now" (the time limit, `scancel`, preemption). Both are counted from the start of the process
// (they may arrive during MPI_Init or while the model is built) and acted on only at step boundaries,
// where every rank agrees on the same step with one small all-reduce.
//
// What follows a signal (runtime.on_signal, and checkpoint.dir):
//   SIGUSR1, "checkpoint-exit"      a checkpoint after the agreed step, then exit kExitCheckpointedOnSignal
//   SIGUSR1, "checkpoint-continue"  a checkpoint after the agreed step, training goes on
//   SIGTERM                         a checkpoint after the agreed step, then exit kExitCheckpointedOnSignal
//                                   (Slurm sends SIGKILL KillWait seconds later: continuing is pointless)
//   no checkpoint.dir               SIGUSR1 is logged and training goes on; SIGTERM ends the run with
//                                   128 + SIGTERM, since nothing can be saved
// One signal reaches the ranks at slightly different times (Slurm signals each task on its own). A
// request that lands on a rank just after the others agreed on a step would, on its own, cause a
// second checkpoint one step later; so a request arriving on any rank within kSignalCoalesceS seconds
// after an agreed checkpoint is taken to be the same signal.
#include <signal.h>

#include <cstdint>
#include <string>

#include "core/config.hpp"

namespace trident {

class Group;

// Exit status of a run that wrote a checkpoint because of a signal and stopped (EX_TEMPFAIL: "try
// again"). jobs/train.sbatch requeues the job on it; it is distinct from 0 (done) and every error code.
inline constexpr int kExitCheckpointedOnSignal = 75;
inline constexpr double kSignalCoalesceS = 10.0;

// Installs the counting handlers for SIGUSR1 and SIGTERM (async-signal-safe). Call first thing in main.
void install_stop_signal_counters();

// Holds SIGUSR1 and SIGTERM pending in this thread while it lives; they are delivered when it ends.
// cli_main runs MPI_Init under it (see there).
class StopSignalsHeld {
 public:
  StopSignalsHeld();
  ~StopSignalsHeld();
  StopSignalsHeld(const StopSignalsHeld&) = delete;
  StopSignalsHeld& operator=(const StopSignalsHeld&) = delete;

 private:
  sigset_t previous_;
};

// Signals counted so far.
long usr1_count();
long term_count();

// What the ranks agreed on at a step boundary.
struct StopDecision {
  bool checkpoint = false;  // write a checkpoint after this step
  bool exit = false;        // then stop training
  int exit_code = 0;        // kExitCheckpointedOnSignal, or 128 + SIGTERM without checkpoints
  std::string signal;       // "SIGUSR1", "SIGTERM" (both: "SIGTERM"); empty when none
};

// The collective check at step boundaries.
class StopSignals {
 public:
  // world: every rank of the run (null for a run without a mesh: one process). The constructor does
  // not communicate.
  StopSignals(const Config& cfg, Group* world);
  // Collective: one all-reduce (MAX) of this rank's pending requests. Every rank returns the same decision.
  StopDecision poll(int64_t step);
  // Call after the checkpoint of an agreed request is written: starts the coalescing window.
  void checkpoint_done();

 private:
  bool checkpoints_;
  OnSignal on_signal_;
  Group* world_;
  long usr1_handled_ = 0;
  long term_handled_ = 0;
  double coalesce_until_ = -1;
};

}  // namespace trident
