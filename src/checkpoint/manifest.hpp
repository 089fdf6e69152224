#pragma once
// The manifest of a checkpoint file (internal): a small text record in the HDF5 user block (the
// first bytes of the file, which HDF5 skips and never reads), written after the collective close and
// before the rename that commits the file. It holds the file size, the step, the byte ranges of the
// tensor data (each verified by its dataset checksum at load) and a checksum of every other byte:
// HDF5's superblock, object headers, link tables, heaps, attributes (the step and every scalar that
// drives resume). Readers check it before HDF5 parses anything, so a damaged or edited file is
// refused with a clear message instead of reaching HDF5's unchecksummed metadata (which can crash
// it). Layout of the user block:
//
//   trident-checkpoint-manifest 1\n
//   {"step":N,"file_size":B,"user_block":U,"data":[[offset,bytes],...],"metadata_checksum":"<hex>"}\n
//   checksum <hex of the two lines above>\n
//   NUL padding up to U bytes
//
// Checksums are the sum64-splitmix of checksum.hpp over bytes, with the file offset as the index.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace trident::ckpt {

// A byte range [offset, offset + bytes) of the file.
struct Extent {
  int64_t offset = 0, bytes = 0;
};

struct Manifest {
  int64_t step = 0;
  int64_t file_size = 0;
  int64_t user_block = 0;
  std::vector<Extent> data;  // sorted, merged
  uint64_t metadata_checksum = 0;
};

// The user block to reserve for a file with n_datasets tensor datasets: a power of two >= 4 KiB
// that holds the manifest even when no two data extents are adjacent.
int64_t user_block_bytes(int64_t n_datasets);

// Serial, on a closed file: hashes every byte outside `data` and writes the manifest into the user
// block (which the file was created with), then fsyncs the file. Throws CheckpointError.
void seal_checkpoint(const std::string& path, int64_t step, int64_t user_block, std::vector<Extent> data);

// Serial. The manifest of `path`, checked completely: its own checksum, the file size, and the
// checksum of every byte outside the tensor data. nullopt for a file written before manifests
// existed (it starts with the HDF5 signature: no user block). Throws CheckpointError naming the file
// and what is wrong ("truncated", "changed since it was written", ...) for anything else.
std::optional<Manifest> verify_manifest(const std::string& path);

// Serial: recomputes the manifest of a checkpoint after a deliberate edit through HDF5 (tests that
// emulate another writer, repair tools), trusting HDF5's view of the file (tools.cpp).
void reseal_checkpoint(const std::string& path);

// Serial and cheap (the user block only): the step the manifest records, checked against the
// manifest's own checksum; nullopt when the file has no valid manifest.
std::optional<int64_t> manifest_step(const std::string& path);

}  // namespace trident::ckpt
