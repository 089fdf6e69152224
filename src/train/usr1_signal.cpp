#include "train/usr1_signal.hpp"

#include <signal.h>

namespace trident {
namespace {

volatile sig_atomic_t g_usr1 = 0;

void on_usr1(int) { g_usr1 = g_usr1 + 1; }

}  // namespace

void install_usr1_counter() {
  struct sigaction sa {};
  sa.sa_handler = on_usr1;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, nullptr);
}

long usr1_count() { return g_usr1; }

}  // namespace trident
