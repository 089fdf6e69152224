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
volatile sig_atomic_t g_int = 0;
volatile sig_atomic_t g_announce = 1;  // this process speaks for the job (cleared on ranks other than 0)
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

// The first SIGINT in training is counted like SIGTERM; any other ends the process here.
void on_int(int) {
  static const char first[] =
      "trident: SIGINT (Ctrl-C): stopping after the current step (with a checkpoint when checkpoint.dir is set); "
      "press Ctrl-C again to stop at once\n";
  static const char again[] =
      "trident: SIGINT (Ctrl-C) again: stopping now, without waiting for the step or a checkpoint; exit status 130\n";
  static const char early[] =
      "trident: SIGINT (Ctrl-C) before training started: stopping now (nothing trained yet, nothing to save); "
      "exit status 130\n";
  const bool counted = g_training && g_int == 0;
  const char* message = counted ? first : g_training ? again : early;
  const size_t length = counted ? sizeof first - 1 : g_training ? sizeof again - 1 : sizeof early - 1;
  if (g_announce) (void)!write(STDERR_FILENO, message, length);
  if (counted) {
    g_int = 1;
    return;
  }
  _exit(128 + SIGINT);
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
  install(SIGINT, on_int);
}

void unblock_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
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
long int_count() { return g_int; }

StopSignals::StopSignals(const Config& cfg, Group* world)
    : checkpoints_(!cfg.checkpoint.dir.empty()), on_signal_(cfg.runtime.on_signal), world_(world) {
  // Ctrl-C reaches every rank: only rank 0 says so from the handler.
  g_announce = log::is_root() ? 1 : 0;
}

StopDecision StopSignals::poll(int64_t step, OutputFailure output) {
  // Read once: a signal landing after this read stays pending for the next step.
  const long usr1 = usr1_count(), term = term_count(), intr = int_count();
  if (now_s() < coalesce_until_) {  // the tail of the signal just handled on the slower ranks
    usr1_handled_ = usr1;
    term_handled_ = term;
    int_handled_ = intr;
  }
  int32_t pending[4] = {usr1 != usr1_handled_ ? 1 : 0, term != term_handled_ ? 1 : 0, int32_t(output),
                        intr != int_handled_ ? 1 : 0};
  // Watched like every collective: a stopped rank is named by the watchdog's message on group 'world'.
  if (world_) world_->all_reduce_host(pending, 4, ReduceOp::Max);
  usr1_handled_ = usr1;
  term_handled_ = term;
  int_handled_ = intr;
  StopDecision d;
  if (pending[2] != 0) return output_failure_stop(step, OutputFailure(pending[2]));
  const bool stop_now = pending[1] || pending[3];  // SIGTERM, or SIGINT (Ctrl-C) which is treated alike
  if (!pending[0] && !stop_now) return d;
  d.signal = pending[1] ? "SIGTERM" : pending[3] ? "SIGINT" : "SIGUSR1";
  const std::string named = d.signal == "SIGINT" ? "SIGINT (Ctrl-C)" : d.signal;
  if (!checkpoints_) {
    if (stop_now) {
      d.exit = true;
      d.exit_code = 128 + (pending[1] ? SIGTERM : SIGINT);
      log::warn("{} received by step {}: stopping without a checkpoint because [checkpoint] dir is empty; exit status {}",
                named, step, d.exit_code);
    } else {
      log::warn("SIGUSR1 received by step {}: no checkpoint is written because [checkpoint] dir is empty", step);
    }
    return d;
  }
  d.checkpoint = true;
  d.exit = stop_now || on_signal_ == OnSignal::CheckpointExit;
  d.exit_code = d.exit ? kExitCheckpointedOnSignal : 0;
  log::warn("{} received by step {}: a checkpoint follows step {}{}", named, step, step,
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
