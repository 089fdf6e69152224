#pragma once
// Host staging of GPU tensors for MPI (runtime.comm = "mpi" on the cuda backend): a tensor is copied
// into page-locked host memory, MPI moves that copy, and what arrived is copied back. Slower than NCCL
// (two PCIe copies per transfer, no overlap inside one) but it works with any MPI and with several
// ranks on one GPU, which NCCL refuses: it is how every parallel layout is tested on a one-GPU machine.
#include <cstdint>
#include <memory>
#include <vector>

namespace trident {

// Copies between the compute backend's memory and page-locked host memory (the CUDA module's
// kernels/cuda/cuda_copies.cpp on a GPU, made by cuda_module().make_copies; tests substitute plain
// host memory to check the staging logic without one).
class DeviceCopies {
 public:
  virtual ~DeviceCopies() = default;
  virtual void* alloc_host(int64_t bytes) = 0;  // page-locked
  virtual void free_host(void* p) = 0;
  // Both return when the copy is complete, after the work queued on the device before them.
  virtual void to_host(void* host, const void* device, int64_t bytes) = 0;
  virtual void to_device(void* device, const void* host, int64_t bytes) = 0;
};

// Page-locked buffers reused across transfers, and the transfers in flight. One per group; used from
// the thread that runs the group's operations.
class HostStaging {
 public:
  explicit HostStaging(std::unique_ptr<DeviceCopies> copies);
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // A slot holding `bytes` of host memory: a copy of device `in` when in is given; on finish the host
  // bytes go back to device `out` when out is given.
  int begin(const void* in, void* out, int64_t bytes);
  void* host(int slot) const { return slots_[size_t(slot)].host; }
  void finish(int slot);

  int in_flight() const;           // slots begun and not finished
  int64_t host_bytes() const;      // page-locked bytes held (the pool never shrinks while it lives)

 private:
  struct Slot {
    void* host = nullptr;
    int64_t capacity = 0;
    void* out = nullptr;
    int64_t bytes = 0;
    bool busy = false;
  };
  int take(int64_t bytes);  // the smallest free slot that fits, else a new one

  std::unique_ptr<DeviceCopies> copies_;
  std::vector<Slot> slots_;
};

}  // namespace trident
