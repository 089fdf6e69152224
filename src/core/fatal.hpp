#pragma once
// Ending the whole job when one rank fails. MPI has no way for a rank to tell the others "I failed"
// that they would notice while blocked in a collective, so the failing rank logs its message and
// calls MPI_Abort, which the launcher (mpiexec, srun) turns into the end of every rank.
#include <cstddef>
#include <exception>
#include <functional>

namespace trident {

// Logs `what` from this rank and aborts every rank of MPI_COMM_WORLD with exit code `code`.
// Outside MPI (or before MPI_Init) it exits the process.
[[noreturn]] void abort_job(const char* what, int code = 1);

// Runs body(); any exception thrown on this rank ends the whole job with one message.
// Returns body's exit code when it returns normally.
int run_or_abort(const std::function<int()>& body);

// Installs std::terminate and signal handlers (SIGSEGV, SIGFPE, SIGBUS, SIGILL) that abort the job.
// Call after MPI_Init: it reads the world size (a 1-rank job exits with 128 + signal itself).
void install_fatal_handlers();

// A file mapped into memory: a SIGBUS inside [base, base + length) (the file was truncated under the
// run) names the file and the offset instead of only the signal. Registrations beyond a fixed number
// of slots are not named.
void register_mapped_file(const void* base, size_t length, const char* path);
void unregister_mapped_file(const void* base);

}  // namespace trident
