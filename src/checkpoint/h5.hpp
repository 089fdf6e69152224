#pragma once
// Thin RAII and attribute helpers over the HDF5 C API for the checkpoint module (internal).
// Every failure throws CheckpointError with the caller's context and HDF5's own innermost message.
#include <hdf5.h>
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace trident::ckpt::h5 {

// Owns an HDF5 identifier and closes it with the matching H5*close.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      closer_ = o.closer_;
      o.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now; throws when HDF5 reports an error (a file close flushes).
  void close(const std::string& what);
  void reset() {
    if (id_ >= 0 && closer_) closer_(id_);
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// Turns HDF5's automatic error printing off (once per process); errors become exceptions here.
void quiet();
// The innermost message of HDF5's current error stack ("" when empty).
std::string error_text();
// Throws CheckpointError("<context>: <HDF5 message>").
[[noreturn]] void fail(const std::string& context);

// Files. comm == MPI_COMM_NULL: the serial (sec2) driver; otherwise MPI-IO over comm (collective,
// with collective metadata reads and writes). user_block_bytes: bytes reserved at the start of the
// file that HDF5 never reads (for the manifest, manifest.hpp); 0 or a power of two >= 512.
Handle create_file(const std::string& path, MPI_Comm comm, int64_t alignment_bytes, int64_t user_block_bytes);
Handle open_file(const std::string& path, MPI_Comm comm);

Handle create_group(hid_t loc, const std::string& name, const std::string& file);
Handle open_group(hid_t loc, const std::string& name, const std::string& file);
Handle open_dataset(hid_t loc, const std::string& name, const std::string& file);
// True when every component of the relative path `name` exists under loc.
bool exists(hid_t loc, const std::string& name);
std::vector<std::string> member_names(hid_t group, const std::string& file, const std::string& group_name);
std::vector<int64_t> dataset_shape(hid_t dset, const std::string& what);

// Attributes (scalar). `what` names the object in errors.
void write_attr(hid_t obj, const std::string& name, int64_t v);
void write_attr_u64(hid_t obj, const std::string& name, uint64_t v);
void write_attr(hid_t obj, const std::string& name, double v);
void write_attr(hid_t obj, const std::string& name, const std::string& v);
bool has_attr(hid_t obj, const std::string& name);
int64_t read_attr_i64(hid_t obj, const std::string& name, const std::string& what);
uint64_t read_attr_u64(hid_t obj, const std::string& name, const std::string& what);
double read_attr_f64(hid_t obj, const std::string& name, const std::string& what);
std::string read_attr_str(hid_t obj, const std::string& name, const std::string& what);

// A fixed-length string type of n bytes (n >= 1), UTF-8, null-padded.
Handle string_type(size_t n);

}  // namespace trident::ckpt::h5
