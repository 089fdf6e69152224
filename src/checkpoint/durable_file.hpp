#pragma once
// Durable file-system steps of the commit protocol (internal): fsync, rename, small files replaced
// atomically. Failures throw CheckpointError naming the path and the system's reason.
#include <string>

namespace trident::ckpt {

// "<what> '<path>': <strerror(errno)>"
std::string sys_error(const std::string& what, const std::string& path);
void fsync_path(const std::string& path, bool directory);
void rename_path(const std::string& from, const std::string& to);
// The directory holding `file` ("." for a bare name).
std::string dir_of(const std::string& file);
// Writes path.tmp, fsyncs it, renames it over path and fsyncs the directory (core/output_file.hpp:
// nothing is left behind on failure), failing with CheckpointError.
void write_text_atomically(const std::string& path, const std::string& text);

}  // namespace trident::ckpt
