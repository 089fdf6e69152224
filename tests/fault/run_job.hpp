#pragma once
// A trident job run in the background for the fault tests: started in its own process group with its
// output in a file, so that a test can act on it while it runs (stop a rank, truncate its data, send
// it a signal) and then measure how and how fast it ends.
#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>

namespace trident::test {

class BackgroundJob {
 public:
  // Runs `sh -c "command"` with stdout and stderr going to output_path. With `pending_signal`, the
  // job starts with that signal blocked and already pending: a command that `exec`s its program
  // (`exec env ... trident ...`, one process throughout) hands it over, so the program receives it
  // the moment it unblocks it, however fast it starts (no race with polling for its process).
  BackgroundJob(const std::string& command, std::string output_path, int pending_signal = 0);
  ~BackgroundJob();  // kills whatever is left of the job (continuing stopped processes first)
  BackgroundJob(const BackgroundJob&) = delete;
  BackgroundJob& operator=(const BackgroundJob&) = delete;

  // Exit status once the job has ended within `seconds` (128 + signal when killed); empty otherwise.
  std::optional<int> wait_for(double seconds);
  std::string output() const;
  // The process of MPI rank `rank` (PMI_RANK in its environment) among the job's descendants named
  // `name`; -1 when there is none (yet).
  pid_t rank_pid(int rank, const std::string& name = "trident") const;
  // The job's process or the first of its descendants named `name` (a job without mpiexec); -1 when
  // there is none.
  pid_t process_named(const std::string& name = "trident") const;

 private:
  pid_t pid_ = -1;
  std::string output_path_;
  std::optional<int> status_;
};

// Polls `done` every 50 ms for up to `seconds`; true as soon as it holds.
bool wait_until(const std::function<bool()>& done, double seconds);

// Whether process `pid` has a handler installed for `sig` (SigCgt in /proc/PID/status).
bool catches_signal(pid_t pid, int sig);

// Number of lines in a file (0 when it does not exist).
int count_lines(const std::string& path);

// A small training deck on the GPL-3 text: 2 layers, width 32, byte tokens; `extra` is appended
// (later keys of a section must not repeat these; use --set for them).
std::string small_deck(int tp, int pp, int dp, const std::string& runtime_extra = "");

}  // namespace trident::test
