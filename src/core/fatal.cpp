#include "core/fatal.hpp"

#include <mpi.h>

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
void on_fatal_signal(int sig) {
  // Only async-signal-safe calls before MPI_Abort; the message is best effort.
  const char* name = sig == SIGSEGV ? "SIGSEGV" : sig == SIGFPE ? "SIGFPE" : sig == SIGBUS ? "SIGBUS" : "SIGILL";
  char buf[96];
  int n = std::snprintf(buf, sizeof buf, "trident: fatal signal %s, ending the job\n", name);
  if (n > 0) (void)!write(STDERR_FILENO, buf, static_cast<size_t>(n));
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Abort(MPI_COMM_WORLD, 128 + sig);
  std::_Exit(128 + sig);
}
}  // namespace

void install_fatal_handlers() {
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
  for (int sig : {SIGSEGV, SIGFPE, SIGBUS, SIGILL}) std::signal(sig, on_fatal_signal);
}

}  // namespace trident
