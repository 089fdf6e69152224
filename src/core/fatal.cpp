#include "core/fatal.hpp"

#include <mpi.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <time.h>
#include <unistd.h>

#include "core/error.hpp"
#include "core/log.hpp"

namespace trident {

void abort_job(const char* what, int code) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  int rank = 0, size = 1;
  if (initialized && !finalized) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
  if (size > 1 && rank != 0) {
    // When every rank fails alike (a deck error, say), rank 0's abort ends the others during this
    // pause and the job prints one message; a failure of this rank alone is reported just after it.
    const timespec pause{0, 500 * 1000 * 1000};
    nanosleep(&pause, nullptr);
  }
  if (size > 1) {
    spdlog::error("{} (rank {} of {} ends the job)", what, rank, size);
  } else {
    spdlog::error("{}", what);
  }
  spdlog::default_logger()->flush();
  std::fflush(stdout);
  std::fflush(stderr);
  if (initialized && !finalized && size > 1) {
    // The launcher (Hydra, srun) forwards our stderr asynchronously and stops forwarding once the abort
    // reaches it: give it a moment to pass the message on (seen lost on a loaded 2-core machine).
    const timespec forward{0, 200 * 1000 * 1000};
    nanosleep(&forward, nullptr);
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  int main_thread = 0;
  if (initialized && !finalized) MPI_Is_thread_main(&main_thread);
  if (main_thread) {
    // A 1-rank job: Hydra (MPICH 4.0) sometimes reports a process that exits without MPI_Finalize as
    // killed by SIGHUP, exit status 1 (pmodels/mpich#7057; seen once in a CI run of a refused resume).
    // On the main thread no MPI call is in flight and there is no peer to wait for, so finalize first.
    MPI_Finalize();
  }
  std::_Exit(code);
}

int run_or_abort(const std::function<int()>& body) {
  try {
    return body();
  } catch (const NotImplemented& e) {
    abort_job(fmt::format("not built yet: {}", e.what()).c_str(), 3);
  } catch (const Error& e) {
    abort_job(e.what(), 2);
  } catch (const std::exception& e) {
    abort_job(fmt::format("internal error: {}", e.what()).c_str(), 1);
  }
}

namespace {

// Fixed slots so that the signal handler reads them without locks or allocation.
struct MappedFileSlot {
  std::atomic<const char*> base{nullptr};
  size_t length = 0;
  char path[512] = {};
};
MappedFileSlot g_mapped[256];
// The job's size, read when the handlers are installed: a 1-rank job ends with _exit, whose status
// (128 + signal) mpiexec and a singleton both report, where MPI_Abort's would be 1.
std::atomic<int> g_world_size{1};

const MappedFileSlot* mapped_file_at(const void* address) {
  const char* a = static_cast<const char*>(address);
  for (const auto& slot : g_mapped) {
    const char* base = slot.base.load();
    if (base && a >= base && a < base + slot.length) return &slot;
  }
  return nullptr;
}

void on_fatal_signal(int sig, siginfo_t* info, void*) {
  // Only async-signal-safe calls before MPI_Abort; the message is best effort.
  const char* name = sig == SIGSEGV ? "SIGSEGV" : sig == SIGFPE ? "SIGFPE" : sig == SIGBUS ? "SIGBUS" : "SIGILL";
  char buf[768];
  int n = std::snprintf(buf, sizeof buf, "trident: fatal signal %s, ending the job\n", name);
  const MappedFileSlot* file = sig == SIGBUS && info ? mapped_file_at(info->si_addr) : nullptr;
  if (file)
    n = std::snprintf(buf, sizeof buf,
                      "trident: fatal signal SIGBUS reading %s at byte offset %zu (mapped with %zu bytes): the file "
                      "was truncated or replaced while the job ran; ending the job\n",
                      file->path, size_t(static_cast<const char*>(info->si_addr) - file->base.load()), file->length);
  if (n > 0) (void)!write(STDERR_FILENO, buf, std::min(size_t(n), sizeof buf - 1));
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized && g_world_size.load() > 1) {
    // As in abort_job: give the launcher a moment to forward the message before the abort ends its
    // forwarding (nanosleep is async-signal-safe).
    const timespec forward{0, 200 * 1000 * 1000};
    nanosleep(&forward, nullptr);
    MPI_Abort(MPI_COMM_WORLD, 128 + sig);
  }
  _exit(128 + sig);
}
}  // namespace

void register_mapped_file(const void* base, size_t length, const char* path) {
  for (auto& slot : g_mapped) {
    if (slot.base.load()) continue;
    slot.length = length;
    std::snprintf(slot.path, sizeof slot.path, "%s", path);
    slot.base.store(static_cast<const char*>(base));  // published last: the handler sees a complete slot
    return;
  }
}

void unregister_mapped_file(const void* base) {
  for (auto& slot : g_mapped)
    if (slot.base.load() == base) slot.base.store(nullptr);
}

void install_fatal_handlers() {
  int initialized = 0, finalized = 0, size = 1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_size(MPI_COMM_WORLD, &size);
  g_world_size.store(size);
  std::set_terminate([] {
    auto eptr = std::current_exception();
    try {
      if (eptr) std::rethrow_exception(eptr);
      abort_job("std::terminate called without an exception");
    } catch (const std::exception& e) {
      abort_job(fmt::format("uncaught exception: {}", e.what()).c_str());
    } catch (...) {
      abort_job("uncaught non-standard exception");
    }
  });
  struct sigaction sa {};
  sa.sa_sigaction = on_fatal_signal;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGFPE, SIGBUS, SIGILL}) sigaction(sig, &sa, nullptr);
}

}  // namespace trident
