#include "app/cli.hpp"
#include "train/stop_signals.hpp"

namespace {

// The stop handlers go in before any shared library is initialised: an ELF executable's
// .preinit_array runs ahead of every library constructor, and those take a measurable time (OpenBLAS
// starts its threads; CUDA's libraries, when they were linked, registered their kernels for ~0.1 s)
// during which SIGTERM or SIGUSR1 from a launcher would find the default action and kill the process
// (a rank's exit 15 or 10).
void install_stop_handlers_first(int, char**, char**) { trident::install_stop_signal_counters(); }
[[gnu::section(".preinit_array"), gnu::used]] void (*const preinit)(int, char**, char**) = install_stop_handlers_first;

}  // namespace

int main(int argc, char** argv) { return trident::cli_main(argc, argv, TRIDENT_BUILD_MPI_THREADS); }
