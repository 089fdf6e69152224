#pragma once
// Host-to-device uploads that never make the host wait for the GPU: a ring of page-locked slots.
//
// A copy from pageable memory makes the host wait until the driver has staged it (gpu-sim: until the
// stream's earlier work has run), which stops the host from queueing the next micro-batch's kernels
// while the GPU works. An upload of at most kSlotBytes instead copies the source into the next free
// page-locked slot on the host and queues the copy from the slot on the stream: it returns at once, it
// is ordered with the stream's kernels, and the caller may reuse its source buffer immediately (the
// token and target ids of every micro-batch, a few hundred KiB at most). A slot is taken again only after
// the event recorded behind its last copy has completed, so the host waits only when it is kSlots uploads
// ahead of the GPU. Larger uploads (weights at start-up) go the pageable way.
#include <cuda_runtime.h>

#include <array>
#include <cstddef>

namespace trident::cuda {

class UploadRing {
 public:
  static constexpr int kSlots = 8;
  static constexpr size_t kSlotBytes = size_t(1) << 20;

  explicit UploadRing(cudaStream_t stream);
  ~UploadRing();
  UploadRing(const UploadRing&) = delete;
  UploadRing& operator=(const UploadRing&) = delete;

  // Queues dst <- src (bytes <= kSlotBytes) on the stream through a slot; false (nothing done) when
  // the upload is larger than a slot.
  bool upload(void* dst, const void* src, size_t bytes);

 private:
  struct Slot {
    void* host = nullptr;        // kSlotBytes of page-locked memory, allocated on first use
    cudaEvent_t done = nullptr;  // recorded behind the slot's last copy
    bool in_flight = false;
  };
  cudaStream_t stream_;
  std::array<Slot, kSlots> slots_{};
  int next_ = 0;
};

}  // namespace trident::cuda
