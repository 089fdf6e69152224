/* Preloaded into `trident` by test_fault_run_signals: a shared library's constructor runs before the
 * executable's main and among the other libraries' constructors (OpenBLAS, CUDA), the time a signal
 * from a launcher can arrive in. It records whether SIGTERM, SIGUSR1 and SIGINT are handled by then in the
 * file named by STOP_HANDLER_PROBE_OUT. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

static const char* disposition(int sig) {
  struct sigaction sa;
  if (sigaction(sig, NULL, &sa) != 0) return "unknown";
  return sa.sa_handler == SIG_DFL ? "default" : "handled";
}

__attribute__((constructor)) static void probe(void) {
  const char* path = getenv("STOP_HANDLER_PROBE_OUT");
  if (!path) return;
  FILE* f = fopen(path, "w");
  if (!f) return;
  fprintf(f, "SIGTERM %s\nSIGUSR1 %s\nSIGINT %s\n", disposition(SIGTERM), disposition(SIGUSR1), disposition(SIGINT));
  fclose(f);
}
