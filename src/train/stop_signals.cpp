#include "train/stop_signals.hpp"

#include <signal.h>
#include <unistd.h>

#include <chrono>

#include "comm/group.hpp"
#include "core/log.hpp"

namespace trident {
namespace {

volatile sig_atomic_t g_usr1 = 0;
volatile sig_atomic_t g_term = 0;
volatile sig_atomic_t g_training = 0;  // set once the first step starts

void on_usr1(int) { g_usr1 = g_usr1 + 1; }

void on_term(int) {
  if (g_training) {
    g_term = g_term + 1;
    return;
  }
  // Before the first step there is nothing to save, and start-up may be blocked (a collective waiting
  // for a rank, a slow file system): end now. Only async-signal-safe calls here.
  static const char message[] =
      "trident: SIGTERM during start-up: stopping now (nothing trained yet, nothing to save); exit status 143\n";
  (void)!write(STDERR_FILENO, message, sizeof message - 1);
  _exit(128 + SIGTERM);
}

void install(int sig, void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(sig, &sa, nullptr);
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

void install_stop_signal_counters() {
  install(SIGUSR1, on_usr1);
  install(SIGTERM, on_term);
}

void unblock_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

void mark_training_started() { g_training = 1; }

StopSignalsHeld::StopSignalsHeld() {
  sigset_t held;
  sigemptyset(&held);
  sigaddset(&held, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &held, &previous_);
}

StopSignalsHeld::~StopSignalsHeld() { pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }

long usr1_count() { return g_usr1; }
long term_count() { return g_term; }

StopSignals::StopSignals(const Config& cfg, Group* world)
    : checkpoints_(!cfg.checkpoint.dir.empty()), on_signal_(cfg.runtime.on_signal), world_(world) {}

StopDecision StopSignals::poll(int64_t step, OutputFailure output) {
  // Read once: a signal landing after this read stays pending for the next step.
  const long usr1 = usr1_count(), term = term_count();
  if (now_s() < coalesce_until_) {  // the tail of the signal just handled on the slower ranks
    usr1_handled_ = usr1;
    term_handled_ = term;
  }
  int32_t pending[3] = {usr1 != usr1_handled_ ? 1 : 0, term != term_handled_ ? 1 : 0, int32_t(output)};
  // Watched like every collective: a stopped rank is named by the watchdog's message on group 'world'.
  if (world_) world_->all_reduce_host(pending, 3, ReduceOp::Max);
  usr1_handled_ = usr1;
  term_handled_ = term;
  StopDecision d;
  if (pending[2] != 0) return output_failure_stop(step, OutputFailure(pending[2]));
  if (!pending[0] && !pending[1]) return d;
  d.signal = pending[1] ? "SIGTERM" : "SIGUSR1";
  if (!checkpoints_) {
    if (pending[1]) {
      d.exit = true;
      d.exit_code = 128 + SIGTERM;
      log::warn("SIGTERM received by step {}: stopping without a checkpoint because [checkpoint] dir is empty", step);
    } else {
      log::warn("SIGUSR1 received by step {}: no checkpoint is written because [checkpoint] dir is empty", step);
    }
    return d;
  }
  d.checkpoint = true;
  d.exit = pending[1] || on_signal_ == OnSignal::CheckpointExit;
  d.exit_code = d.exit ? kExitCheckpointedOnSignal : 0;
  log::warn("{} received by step {}: a checkpoint follows step {}{}", d.signal, step, step,
            d.exit ? fmt::format(", then the run stops (exit status {})", kExitCheckpointedOnSignal) : "");
  return d;
}

StopDecision StopSignals::output_failure_stop(int64_t step, OutputFailure failure) const {
  StopDecision d;
  d.signal = "an output failure";
  d.output_failed = true;
  d.exit = true;
  d.checkpoint = checkpoints_;
  d.exit_code = checkpoints_ && failure == OutputFailure::Retryable ? kExitCheckpointedOnSignal : kExitOutputFailed;
  if (log::is_root())
    log::warn("an output could not be written after step {}: {}, then the run stops (exit status {}{})", step,
            checkpoints_ ? fmt::format("a checkpoint follows step {}", step) : std::string("no checkpoint.dir to save to"),
            d.exit_code,
            d.exit_code == kExitCheckpointedOnSignal ? ": a requeued job resumes once the file system has room again"
                                                     : ": fix the output and resubmit");
  return d;
}

void StopSignals::checkpoint_done() { coalesce_until_ = now_s() + kSignalCoalesceS; }

}  // namespace trident
