#include "comm/staging.hpp"

#include "core/error.hpp"

namespace trident {

namespace {
// Buffers are rounded up to a power of two (at least 64 KiB), so that the varying sizes of one run's
// messages (buckets, boundary activations, segments) settle on a few reusable buffers.
int64_t rounded(int64_t bytes) {
  int64_t r = int64_t(1) << 16;
  while (r < bytes) r *= 2;
  return r;
}
}  // namespace

HostStaging::HostStaging(std::unique_ptr<DeviceCopies> copies) : copies_(std::move(copies)) {
  TRIDENT_CHECK(copies_ != nullptr, "internal: host staging without device copies");
}

HostStaging::~HostStaging() {
  for (Slot& s : slots_) copies_->free_host(s.host);
}

int HostStaging::take(int64_t bytes) {
  int best = -1;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (!s.busy && s.capacity >= bytes && (best < 0 || s.capacity < slots_[size_t(best)].capacity)) best = int(i);
  }
  if (best >= 0) return best;
  Slot s;
  s.capacity = rounded(bytes);
  s.host = copies_->alloc_host(s.capacity);
  slots_.push_back(s);
  return int(slots_.size()) - 1;
}

int HostStaging::begin(const void* in, void* out, int64_t bytes) {
  const int i = take(bytes);
  Slot& s = slots_[size_t(i)];
  s.busy = true;
  s.out = out;
  s.bytes = bytes;
  if (in && bytes > 0) copies_->to_host(s.host, in, bytes);
  return i;
}

void HostStaging::finish(int slot) {
  TRIDENT_CHECK(slot >= 0 && size_t(slot) < slots_.size() && slots_[size_t(slot)].busy,
                "internal: staging slot {} finished twice or never begun", slot);
  Slot& s = slots_[size_t(slot)];
  s.busy = false;  // first: a failed copy must not leave the slot taken for ever
  if (s.out && s.bytes > 0) copies_->to_device(s.out, s.host, s.bytes);
}

int HostStaging::in_flight() const {
  int n = 0;
  for (const Slot& s : slots_) n += s.busy ? 1 : 0;
  return n;
}

int64_t HostStaging::host_bytes() const {
  int64_t n = 0;
  for (const Slot& s : slots_) n += s.capacity;
  return n;
}

}  // namespace trident
