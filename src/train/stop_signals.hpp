#pragma once
// SIGUSR1 and SIGTERM: Slurm's "time is nearly up" (`--signal=USR1@N`, `scancel --signal=USR1`) and
// "stop now" (the time limit, `scancel`, preemption); SIGINT (Ctrl-C, which mpiexec forwards to the
// ranks) is treated as SIGTERM, and a second SIGINT ends the process at once. The handlers are
// installed first thing in main (and kept through the BLAS re-execution and MPI_Init), so no signal
// finds a process without them.
// SIGUSR1 is counted from the start of the process (it may arrive during MPI_Init or while the model
// is built); SIGTERM or SIGINT before the first step ends the process at once with 128 + the signal
// (nothing is trained yet, and start-up may be blocked); after that they are acted on only at step
// boundaries, where every rank agrees on the same step with one small all-reduce.
//
// What follows a signal (runtime.on_signal, and checkpoint.dir):
//   SIGUSR1, "checkpoint-exit"      a checkpoint after the agreed step, then exit kExitCheckpointedOnSignal
//   SIGUSR1, "checkpoint-continue"  a checkpoint after the agreed step, training goes on
//   SIGTERM, SIGINT                 a checkpoint after the agreed step, then exit kExitCheckpointedOnSignal
//                                   (Slurm sends SIGKILL KillWait seconds later: continuing is pointless)
//   no checkpoint.dir               SIGUSR1 is logged and training goes on; SIGTERM (SIGINT) ends the run
//                                   with 128 + SIGTERM (SIGINT), since nothing can be saved
//   a second SIGINT                 ends the process at once, in the handler, with 128 + SIGINT (a user
//                                   who presses Ctrl-C twice does not want to wait for the step or the
//                                   checkpoint)
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

// Exit status of a run that wrote a checkpoint because of a signal, or of an output failure a retry
// may not meet (a full file system), and stopped (EX_TEMPFAIL: "try again"). jobs/train.sbatch
// requeues the job on it; it is distinct from 0 (done) and every error code.
inline constexpr int kExitCheckpointedOnSignal = 75;
// Exit status of a run stopped because an output (metrics, trace) could not be written and a retry
// cannot help by itself (EX_IOERR): not requeued. With checkpoint.dir its last step was checkpointed.
inline constexpr int kExitOutputFailed = 74;

// An output that failed on this rank, as the ranks agree on it (the larger wins).
enum class OutputFailure : int32_t { None = 0, Permanent = 1, Retryable = 2 };
inline constexpr double kSignalCoalesceS = 10.0;

// Installs the counting handlers for SIGUSR1, SIGTERM and SIGINT (async-signal-safe). Call first thing in main.
void install_stop_signal_counters();

// From now on SIGTERM is counted for the step boundary instead of ending the process. Call just
// before the first step.
void mark_training_started();

// Unblocks SIGUSR1, SIGTERM and SIGINT in this thread (they are blocked across the BLAS re-execution, which
// keeps them pending; blas_runtime.hpp).
void unblock_stop_signals();

// Holds SIGUSR1 pending in this thread while it lives; it is delivered when it ends. cli_main runs
// MPI_Init under it (see there).
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
long int_count();

// What the ranks agreed on at a step boundary.
struct StopDecision {
  bool checkpoint = false;  // write a checkpoint after this step
  bool exit = false;        // then stop training
  int exit_code = 0;        // kExitCheckpointedOnSignal, kExitOutputFailed, or 128 + SIGTERM/SIGINT without checkpoints
  bool output_failed = false;  // an output failure rather than a signal: the exit status stands even after the last step
  std::string signal;       // what stopped it: "SIGUSR1", "SIGTERM", "SIGINT" (several: the first of SIGTERM,
                            // SIGINT, SIGUSR1), "an output failure"; empty when none
};

// The collective check at step boundaries.
class StopSignals {
 public:
  // world: every rank of the run (null for a run without a mesh: one process). The constructor does
  // not communicate.
  StopSignals(const Config& cfg, Group* world);
  // Collective: one all-reduce (MAX) of this rank's pending requests and `output` (an output this rank
  // failed to write after the step). Every rank returns the same decision. An output failure stops the
  // run after a checkpoint (with checkpoint.dir), exit kExitCheckpointedOnSignal when it is retryable
  // and checkpointed, kExitOutputFailed otherwise; it outranks the signals.
  StopDecision poll(int64_t step, OutputFailure output = OutputFailure::None);
  // Call after the checkpoint of an agreed request is written: starts the coalescing window.
  void checkpoint_done();

 private:
  StopDecision output_failure_stop(int64_t step, OutputFailure failure) const;

  bool checkpoints_;
  OnSignal on_signal_;
  Group* world_;
  long usr1_handled_ = 0;
  long term_handled_ = 0;
  long int_handled_ = 0;
  double coalesce_until_ = -1;
};

}  // namespace trident
