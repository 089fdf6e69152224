#include "fault/checkpoint_fault_util.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>

#include "common/test_support.hpp"
#include "deck/deck.hpp"
#include "train/progress.hpp"

namespace fs = std::filesystem;

namespace trident::test {
namespace {

constexpr const char* kTinyDeck = R"(
[model]
vocab_size = 256
seq_len = 8
layers = 1
hidden = 16
heads = 4
seed = 5
[train]
steps = 10
micro_batch = 1
global_batch = 4
[data]
format = "text"
path = "/usr/share/common-licenses/GPL-3"
[runtime]
mpi_wait = "poll"
)";

std::vector<std::string> dirs;

class RemoveDirs : public ::testing::Environment {
 public:
  void TearDown() override {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0 && !std::getenv("TRIDENT_KEEP_TEST_FILES"))
      for (const auto& d : dirs) fs::remove_all(d);
  }
};
[[maybe_unused]] ::testing::Environment* const remove_dirs = ::testing::AddGlobalTestEnvironment(new RemoveDirs);

void point(TinyState& s) {
  s.shard.layout = s.layout.get();
  s.shard.params = s.params.data();
  s.shard.exp_avg = s.m.data();
  s.shard.exp_avg_sq = s.v.data();
}

}  // namespace

std::unique_ptr<TinyState> tiny_state(uint64_t value_seed) {
  auto s = std::make_unique<TinyState>();
  const int world = world_size(), rank = world_rank();
  s->cfg = parse_deck(kTinyDeck, "tiny.toml", {"mesh.tp=" + std::to_string(world)});
  s->layout = std::make_unique<ParameterLayout>(GptShapes::from(s->cfg.model, world), rank, world);
  const int64_t n = s->layout->total();
  for (auto* buf : {&s->params, &s->m, &s->v}) {
    buf->assign(size_t(n), 0.f);
    const double base = double(value_seed) * 1e6 + double(buf == &s->m) * 3e4 + double(buf == &s->v) * 6e4;
    // Tensors replicated over the TP group hold the same values on every rank, as in training.
    for (const auto& t : s->layout->tensors()) {
      const double shard = t.split == TpSplit::None ? 0.0 : double(rank) * 1e5;
      for (int64_t i = t.offset; i < t.offset + t.numel; ++i) (*buf)[size_t(i)] = float(std::sin(base + shard + double(i)));
    }
  }
  for (auto& x : s->v) x = std::fabs(x);  // second moments are non-negative
  point(*s);
  return s;
}

std::unique_ptr<TinyState> empty_like(const TinyState& t) {
  auto s = std::make_unique<TinyState>();
  s->cfg = t.cfg;
  s->layout = std::make_unique<ParameterLayout>(*t.layout);
  s->params.assign(t.params.size(), -1.f);
  s->m.assign(t.m.size(), -1.f);
  s->v.assign(t.v.size(), -1.f);
  point(*s);
  return s;
}

std::string write_tiny(const TinyState& s, const std::string& dir, int64_t step, int64_t keep,
                       const WriteOptions& options) {
  Config cfg = s.cfg;
  cfg.checkpoint.dir = dir;
  cfg.checkpoint.keep = keep;
  return write_checkpoint(dir, cfg, s.shard, progress_after_step(cfg, step, 1.0), MPI_COMM_WORLD, options);
}

std::string shared_temp_dir(const std::string& prefix) {
  std::string d;
  if (world_rank() == 0) d = make_temp_dir(prefix);
  int n = int(d.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
  d.resize(size_t(n));
  MPI_Bcast(d.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
  dirs.push_back(d);
  return d;
}

const char* name_of(ByteClass c) {
  return c == ByteClass::UserBlock ? "user block" : c == ByteClass::Metadata ? "HDF5 metadata" : "tensor data";
}

namespace {

herr_t collect_dataset(hid_t group, const char* name, const H5O_info_t* info, void* data) {
  if (info->type != H5O_TYPE_DATASET || std::string(name) == "deck") return 0;
  hid_t d = H5Dopen2(group, name, H5P_DEFAULT);
  auto* out = static_cast<std::vector<std::pair<int64_t, int64_t>>*>(data);
  out->push_back({int64_t(H5Dget_offset(d)), int64_t(H5Dget_storage_size(d))});
  H5Dclose(d);
  return 0;
}

}  // namespace

std::vector<ByteClass> classify(const std::string& path, const std::string& bytes) {
  const std::string signature("\x89HDF\r\n\x1a\n", 8);
  size_t superblock = 0;
  while (superblock < bytes.size() && bytes.compare(superblock, 8, signature) != 0) superblock = superblock ? superblock * 2 : 512;
  std::vector<ByteClass> cls(bytes.size(), ByteClass::Metadata);
  std::fill(cls.begin(), cls.begin() + std::ptrdiff_t(std::min(superblock, bytes.size())), ByteClass::UserBlock);
  std::vector<std::pair<int64_t, int64_t>> data;
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  H5Ovisit(f, H5_INDEX_NAME, H5_ITER_INC, collect_dataset, &data);
  H5Fclose(f);
  for (const auto& [offset, size] : data)
    for (int64_t i = offset; i < offset + size && i < int64_t(bytes.size()); ++i) cls[size_t(i)] = ByteClass::TensorData;
  return cls;
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

namespace {
void xor_byte(const std::string& path, int64_t offset, int bit) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.get(c);
  f.seekp(offset);
  f.put(char(c ^ (1 << bit)));
}
}  // namespace

FlippedBit::FlippedBit(const std::string& path, int64_t offset, int bit) : path_(path), offset_(offset), bit_(bit) {
  xor_byte(path_, offset_, bit_);
}
FlippedBit::~FlippedBit() { xor_byte(path_, offset_, bit_); }

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace trident::test
