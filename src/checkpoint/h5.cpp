#include "checkpoint/h5.hpp"

#include <fmt/format.h>

#include <cstring>
#include <mutex>

#include "checkpoint/checkpoint_error.hpp"

namespace trident::ckpt::h5 {

void quiet() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

namespace {

herr_t collect(unsigned, const H5E_error2_t* e, void* data) {
  auto* out = static_cast<std::vector<std::string>*>(data);
  if (e->desc && *e->desc) out->push_back(e->desc);
  return 0;
}

}  // namespace

std::string error_text() {
  std::vector<std::string> msgs;  // innermost first
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect, &msgs);
  H5Eclear2(H5E_DEFAULT);
  // The innermost messages are the specific ones ("truncated file: eof = ..."); keep two distinct.
  std::string text;
  int kept = 0;
  for (size_t i = 0; i < msgs.size() && kept < 2; ++i) {
    if (text.find(msgs[i]) != std::string::npos) continue;
    text += (text.empty() ? "" : "; ") + msgs[i];
    ++kept;
  }
  return text;
}

void fail(const std::string& context) {
  const std::string detail = error_text();
  throw CheckpointError(detail.empty() ? context : context + " (HDF5: " + detail + ")");
}

void Handle::close(const std::string& what) {
  if (id_ < 0) return;
  const herr_t rc = closer_ ? closer_(id_) : 0;
  id_ = H5I_INVALID_HID;
  if (rc < 0) fail(what);
}

namespace {

Handle file_access(MPI_Comm comm, int64_t alignment_bytes) {
  Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (!fapl.valid()) fail("H5Pcreate(H5P_FILE_ACCESS)");
  if (comm != MPI_COMM_NULL) {
    if (H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL) < 0) fail("H5Pset_fapl_mpio");
    // Metadata is read by one rank and broadcast, and written collectively: no metadata storm
    // from thousands of ranks.
    if (H5Pset_all_coll_metadata_ops(fapl, true) < 0) fail("H5Pset_all_coll_metadata_ops");
    if (H5Pset_coll_metadata_write(fapl, true) < 0) fail("H5Pset_coll_metadata_write");
  }
  if (alignment_bytes > 0 && H5Pset_alignment(fapl, 1 << 20, hsize_t(alignment_bytes)) < 0) fail("H5Pset_alignment");
  return fapl;
}

}  // namespace

Handle create_file(const std::string& path, MPI_Comm comm, int64_t alignment_bytes, int64_t user_block_bytes) {
  quiet();
  Handle fapl = file_access(comm, alignment_bytes);
  Handle fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose);
  if (user_block_bytes > 0 && H5Pset_userblock(fcpl, hsize_t(user_block_bytes)) < 0) fail("H5Pset_userblock");
  // The 1.8 file format: checksummed object headers and superblock, so damaged metadata is detected
  // by HDF5 itself; readable by every HDF5 >= 1.8 (h5py included).
  if (H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18) < 0) fail("H5Pset_libver_bounds");
  Handle f(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl, fapl), H5Fclose);
  if (!f.valid()) fail(fmt::format("{}: cannot create the checkpoint file", path));
  return f;
}

Handle open_file(const std::string& path, MPI_Comm comm) {
  quiet();
  Handle fapl = file_access(comm, 0);
  Handle f(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), H5Fclose);
  if (!f.valid()) fail(fmt::format("{}: cannot open as an HDF5 file (missing, truncated or not HDF5)", path));
  return f;
}

Handle create_group(hid_t loc, const std::string& name, const std::string& file) {
  Handle g(H5Gcreate2(loc, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (!g.valid()) fail(fmt::format("{}: cannot create group {}", file, name));
  return g;
}

Handle open_group(hid_t loc, const std::string& name, const std::string& file) {
  if (!exists(loc, name)) throw CheckpointError(fmt::format("{}: group {} is missing", file, name));
  Handle g(H5Gopen2(loc, name.c_str(), H5P_DEFAULT), H5Gclose);
  if (!g.valid()) fail(fmt::format("{}: cannot open group {}", file, name));
  return g;
}

Handle open_dataset(hid_t loc, const std::string& name, const std::string& file) {
  if (!exists(loc, name)) throw CheckpointError(fmt::format("{}: dataset {} is missing", file, name));
  Handle d(H5Dopen2(loc, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!d.valid()) fail(fmt::format("{}: cannot open dataset {}", file, name));
  return d;
}

bool exists(hid_t loc, const std::string& name) {
  // H5Lexists needs every intermediate component to exist: check them in turn.
  size_t pos = name[0] == '/' ? 1 : 0;
  while (true) {
    const size_t slash = name.find('/', pos);
    const std::string prefix = name.substr(0, slash);
    if (prefix.empty() || prefix == "/") return true;
    const htri_t e = H5Lexists(loc, prefix.c_str(), H5P_DEFAULT);
    if (e <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
    if (slash == std::string::npos) return true;
    pos = slash + 1;
  }
}

namespace {
herr_t add_name(hid_t, const char* name, const H5L_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->push_back(name);
  return 0;
}
}  // namespace

std::vector<std::string> member_names(hid_t group, const std::string& file, const std::string& group_name) {
  std::vector<std::string> names;
  hsize_t idx = 0;
  if (H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, &idx, add_name, &names) < 0)
    fail(fmt::format("{}: cannot list group {}", file, group_name));
  return names;
}

std::vector<int64_t> dataset_shape(hid_t dset, const std::string& what) {
  Handle space(H5Dget_space(dset), H5Sclose);
  if (!space.valid()) fail(what + ": cannot read the dataspace");
  const int nd = H5Sget_simple_extent_ndims(space);
  if (nd < 0) fail(what + ": cannot read the dataspace");
  std::vector<hsize_t> dims(nd);
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  return std::vector<int64_t>(dims.begin(), dims.end());
}

namespace {

void write_scalar_attr(hid_t obj, const std::string& name, hid_t file_type, hid_t mem_type, const void* data) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  Handle a(H5Acreate2(obj, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!a.valid()) fail("cannot create attribute " + name);
  if (H5Awrite(a, mem_type, data) < 0) fail("cannot write attribute " + name);
}

Handle open_attr(hid_t obj, const std::string& name, const std::string& what) {
  if (H5Aexists(obj, name.c_str()) <= 0) {
    H5Eclear2(H5E_DEFAULT);
    throw CheckpointError(fmt::format("{}: attribute {} is missing", what, name));
  }
  Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  if (!a.valid()) fail(fmt::format("{}: cannot open attribute {}", what, name));
  return a;
}

template <class T>
T read_numeric(hid_t obj, const std::string& name, const std::string& what, hid_t mem_type) {
  Handle a = open_attr(obj, name, what);
  Handle space(H5Aget_space(a), H5Sclose);
  if (H5Sget_simple_extent_npoints(space) != 1)
    throw CheckpointError(fmt::format("{}: attribute {} is not a scalar", what, name));
  Handle type(H5Aget_type(a), H5Tclose);
  const H5T_class_t cls = H5Tget_class(type);
  if (cls != H5T_INTEGER && cls != H5T_FLOAT)
    throw CheckpointError(fmt::format("{}: attribute {} is not a number", what, name));
  T v{};
  if (H5Aread(a, mem_type, &v) < 0) fail(fmt::format("{}: cannot read attribute {}", what, name));
  return v;
}

}  // namespace

Handle string_type(size_t n) {
  Handle t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t, n == 0 ? 1 : n);
  H5Tset_strpad(t, H5T_STR_NULLPAD);
  H5Tset_cset(t, H5T_CSET_UTF8);
  return t;
}

void write_attr(hid_t obj, const std::string& name, int64_t v) {
  write_scalar_attr(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}
void write_attr_u64(hid_t obj, const std::string& name, uint64_t v) {
  write_scalar_attr(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v);
}
void write_attr(hid_t obj, const std::string& name, double v) {
  write_scalar_attr(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}
void write_attr(hid_t obj, const std::string& name, const std::string& v) {
  Handle t = string_type(v.size());
  std::string padded = v;
  if (padded.empty()) padded.push_back('\0');
  write_scalar_attr(obj, name, t, t, padded.data());
}

bool has_attr(hid_t obj, const std::string& name) {
  const htri_t e = H5Aexists(obj, name.c_str());
  if (e < 0) H5Eclear2(H5E_DEFAULT);
  return e > 0;
}

int64_t read_attr_i64(hid_t obj, const std::string& name, const std::string& what) {
  return read_numeric<int64_t>(obj, name, what, H5T_NATIVE_INT64);
}
uint64_t read_attr_u64(hid_t obj, const std::string& name, const std::string& what) {
  return read_numeric<uint64_t>(obj, name, what, H5T_NATIVE_UINT64);
}
double read_attr_f64(hid_t obj, const std::string& name, const std::string& what) {
  return read_numeric<double>(obj, name, what, H5T_NATIVE_DOUBLE);
}

std::string read_attr_str(hid_t obj, const std::string& name, const std::string& what) {
  Handle a = open_attr(obj, name, what);
  Handle type(H5Aget_type(a), H5Tclose);
  if (H5Tget_class(type) != H5T_STRING) throw CheckpointError(fmt::format("{}: attribute {} is not a string", what, name));
  if (H5Tis_variable_str(type) > 0) {
    Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem, H5T_VARIABLE);
    char* s = nullptr;
    if (H5Aread(a, mem, &s) < 0) fail(fmt::format("{}: cannot read attribute {}", what, name));
    std::string out = s ? s : "";
    H5free_memory(s);
    return out;
  }
  const size_t n = H5Tget_size(type);
  std::string buf(n, '\0');
  if (H5Aread(a, type, buf.data()) < 0) fail(fmt::format("{}: cannot read attribute {}", what, name));
  buf.resize(std::strlen(buf.c_str()));
  return buf;
}

}  // namespace trident::ckpt::h5
