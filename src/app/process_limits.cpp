#include "app/process_limits.hpp"

#include <sys/resource.h>

#include <cstdio>

namespace trident {
namespace {

// A 2-rank CPU run with checkpoints holds about 30 descriptors per rank at its peak (MPICH 4.0's
// shared memory and sockets, data, HDF5; counted in /proc/PID/fd): twice that, with headroom.
constexpr rlim_t kMinOpenFiles = 64;

}  // namespace

bool raise_open_file_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return true;  // unknown: let MPI try
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  if (limit.rlim_cur >= kMinOpenFiles) return true;
  std::fprintf(stderr,
               "trident: the open-file limit is %llu (ulimit -n; hard limit %llu), below the %llu descriptors MPI and "
               "a run need; raise it (ulimit -n %llu or more, or ask your site why the job's limit is so low)\n",
               static_cast<unsigned long long>(limit.rlim_cur), static_cast<unsigned long long>(limit.rlim_max),
               static_cast<unsigned long long>(kMinOpenFiles), static_cast<unsigned long long>(4 * kMinOpenFiles));
  return false;
}

}  // namespace trident
