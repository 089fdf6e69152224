#include "comm/held_transfers.hpp"

#include <algorithm>

namespace trident {

std::vector<Transfer> HeldTransfers::post(const Transfer& t) {
  held_.push_back(t);
  return t.send ? all() : std::vector<Transfer>{};
}

std::vector<Transfer> HeldTransfers::wait_for(int slot) {
  const auto it = std::find_if(held_.begin(), held_.end(), [&](const Transfer& t) { return t.slot == slot; });
  if (it == held_.end()) return {};
  std::vector<Transfer> now(held_.begin(), it + 1);
  held_.erase(held_.begin(), it + 1);
  return now;
}

std::vector<Transfer> HeldTransfers::all() {
  std::vector<Transfer> now;
  now.swap(held_);
  return now;
}

bool HeldTransfers::holds(int slot) const {
  return std::any_of(held_.begin(), held_.end(), [&](const Transfer& t) { return t.slot == slot; });
}

}  // namespace trident
