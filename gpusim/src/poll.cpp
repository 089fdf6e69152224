// Polling waits that leave the core to others: ranks of a test often outnumber the cores, and a
// rank spinning in a wait slows the rank it waits for (shared/notes/toolchain.md).
#include <chrono>
#include <thread>

#include "gpusim/runtime.hpp"

namespace gpusim {

void poll_pause(int& round) {
  ++round;
  if (round < 64) {
    std::this_thread::yield();
    return;
  }
  const int us = round < 1024 ? 1 + round / 32 : 50;
  std::this_thread::sleep_for(std::chrono::microseconds(us));
}

}  // namespace gpusim
