#pragma once
// The files a run writes for its user (metrics, trace, exported configs, `latest`) fail alike: one
// OutputError naming the file and the system's reason (errno), and never a partial record behind:
// a record file gets whole lines or is truncated back to its last whole line, a whole file is written
// beside its final name and renamed into place (or removed). Outputs are opened without blocking and
// must be regular files (a FIFO or device in their place is refused).
#include <string>

#include "core/error.hpp"

namespace trident {

class OutputError : public Error {
 public:
  // what: the output, e.g. "[runtime] metrics"; err: the errno of the failed call.
  OutputError(const std::string& what, const std::string& path, int err, const std::string& action = "cannot write");
  int error_number() const { return err_; }
  // A failure a later attempt may not meet (a full or over-quota file system, an I/O or network
  // error): worth a requeue. Permissions, a read-only file system or a bad path are not.
  bool retryable() const;

 private:
  int err_;
};

// An append-only file of records (JSON lines): each append is the whole record or nothing.
class RecordFile {
 public:
  // Opens (creates) `path`; `append` keeps what it holds, otherwise it is emptied. Throws OutputError.
  RecordFile(std::string what, std::string path, bool append);
  ~RecordFile();
  RecordFile(const RecordFile&) = delete;
  RecordFile& operator=(const RecordFile&) = delete;

  // Appends `record` (a line with its '\n'). On failure the file is truncated back to its size before
  // the call and OutputError is thrown.
  void append(const std::string& record);

 private:
  std::string what_, path_;
  int fd_ = -1;
};

// A whole file written in pieces: path.tmp is filled by append(); commit() fsyncs it, renames it over
// path and fsyncs the directory. On failure, or when destroyed uncommitted (an exception on the way),
// path.tmp is removed and path keeps its previous content. Failures throw OutputError.
class AtomicFile {
 public:
  AtomicFile(std::string what, std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void append(const void* data, size_t bytes);
  void commit();

 private:
  void fail(int err);  // removes path.tmp, throws OutputError

  std::string what_, path_, tmp_;
  int fd_ = -1;
};

// Writes `text` as the whole of `path` through an AtomicFile.
void write_file_atomically(const std::string& what, const std::string& path, const std::string& text);

}  // namespace trident
