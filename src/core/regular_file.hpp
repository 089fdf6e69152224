#pragma once
// Opening files a user names (data, checkpoints, `latest`, model.init_from) so that no special file can
// block or exhaust the process: the path is checked with stat before it is opened, the open itself is
// non-blocking (a FIFO swapped in between cannot hang it), the opened file is checked again with fstat,
// and small metadata files are read with a bound. Anything but a regular file is refused with an
// Error naming the path and what it is ("a FIFO", "a character device", ...).
#include <sys/types.h>

#include <cstddef>
#include <string>

namespace trident {

// "a regular file", "a directory", "a FIFO", "a character device", "a block device", "a socket", ...
std::string file_type_name(mode_t mode);

// Opens a regular file read-only (O_CLOEXEC); returns the descriptor, which the caller closes.
// Throws Error "cannot open 'PATH': ..." for a missing or unreadable file or one that is not regular.
int open_regular_file(const std::string& path);

// Throws Error unless `path` is (or links to) a regular file; does not open it.
void require_regular_file(const std::string& path);

// The whole content of a regular file of at most `max_bytes` bytes; throws Error for a larger one.
std::string read_small_file(const std::string& path, size_t max_bytes);

}  // namespace trident
