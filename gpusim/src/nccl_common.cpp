// gpu-sim's NCCL: version, error texts, and the polling wait that every blocking point uses.
#include <climits>
#include <cstdio>
#include <deque>

#include "gpusim/runtime.hpp"
#include "nccl_internal.hpp"

namespace gpusim::nccl {
namespace {

thread_local std::string t_last_error;

// Prints a peer's abort once per communicator.
void report_remote_abort(ncclComm& c) {
  int expected = ncclSuccess;
  if (c.async_error.compare_exchange_strong(expected, ncclRemoteError))
    std::fprintf(stderr, "gpu-sim NCCL: rank %d of %d: a peer aborted the communicator; its operations fail\n", c.rank,
                 c.size);
}

}  // namespace

ncclResult_t fail(ncclResult_t code, const std::string& message) {
  std::fprintf(stderr, "gpu-sim NCCL: %s\n", message.c_str());
  t_last_error = message;
  return code;
}

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, size_t(length));
}

ncclResult_t check_mpi(const char* call) {
  int initialized = 0, finalized = 0, level = MPI_THREAD_SINGLE;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized)
    return fail(ncclInvalidUsage, std::string(call) +
                                      ": MPI is not running (NCCL runs over MPI in gpu-sim: call "
                                      "MPI_Init_thread first, and NCCL before MPI_Finalize)");
  MPI_Query_thread(&level);
  if (level != MPI_THREAD_MULTIPLE)
    return fail(ncclInvalidUsage, std::string(call) +
                                      ": MPI was initialised without MPI_THREAD_MULTIPLE (gpu-sim "
                                      "runs NCCL operations on stream threads: use MPI_Init_thread "
                                      "with MPI_THREAD_MULTIPLE)");
  return ncclSuccess;
}

void set_async_error(ncclComm& c, ncclResult_t error) {
  int expected = ncclSuccess;
  c.async_error.compare_exchange_strong(expected, error);
}

ncclResult_t interruption(ncclComm& c) {
  if (c.aborted) return ncclInternalError;
  if (c.async_error == ncclSuccess) {
    int notice = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, kAbortNotice, c.control, &notice, MPI_STATUS_IGNORE);
    if (notice) report_remote_abort(c);
  }
  return ncclResult_t(c.async_error.load());
}

ncclResult_t wait_all(std::vector<MPI_Request>& requests, MPI_Status* statuses, const std::vector<ncclComm*>& comms,
                      const std::string& what) {
  std::vector<MPI_Status> own(statuses ? 0 : requests.size());
  if (!statuses) statuses = own.data();
  for (int round = 0;; poll_pause(round)) {
    int done = 0;
    const int rc = MPI_Testall(int(requests.size()), requests.data(), &done, statuses);
    if (rc != MPI_SUCCESS) {
      int code = rc;
      for (size_t i = 0; rc == MPI_ERR_IN_STATUS && i < requests.size(); ++i)
        if (statuses[i].MPI_ERROR != MPI_SUCCESS && statuses[i].MPI_ERROR != MPI_ERR_PENDING)
          code = statuses[i].MPI_ERROR;
      return fail(ncclSystemError, what + ": MPI error: " + mpi_error_text(code));
    }
    if (done) return ncclSuccess;
    for (ncclComm* c : comms)
      if (const ncclResult_t why = interruption(*c); why != ncclSuccess) return why;
  }
}

const char* interruption_text(ncclResult_t why) {
  switch (why) {
    case ncclInternalError:
      return "the communicator was aborted";
    case ncclRemoteError:
      return "a peer aborted the communicator";
    default:
      return "an earlier operation of the communicator failed";
  }
}

void abandon(std::vector<MPI_Request> requests, std::shared_ptr<const void> buffers) {
  struct Abandoned {
    std::vector<MPI_Request> requests;
    std::shared_ptr<const void> buffers;
  };
  static std::mutex lock;
  static std::deque<Abandoned> kept;  // reachable until exit: MPI may still write the buffers
  std::lock_guard guard(lock);
  kept.push_back(Abandoned{std::move(requests), std::move(buffers)});
}

size_t type_size(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

ncclResult_t check_task(const char* call, ncclComm_t handle, size_t count, ncclDataType_t type, bool bytes,
                        CommPtr* comm) {
  *comm = find_comm(handle, call);
  if (!*comm) return ncclInvalidArgument;
  const size_t size = type_size(type);
  if (size == 0)
    return fail(ncclInvalidArgument,
                std::string(call) + ": data type " + std::to_string(int(type)) +
                    (type >= 0 && type < ncclNumTypes ? " (half or fp8) is not implemented in gpu-sim yet"
                                                      : " is not an ncclDataType_t"));
  if (count > size_t(INT_MAX) || (bytes && count * size > size_t(INT_MAX)))
    return fail(ncclInvalidArgument, std::string(call) + ": count " + std::to_string(count) +
                                         " is more than gpu-sim passes to one MPI call (2^31-1 " +
                                         (bytes ? "bytes)" : "elements)"));
  return ncclSuccess;
}

}  // namespace gpusim::nccl

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return gpusim::nccl::fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error (an MPI error in gpu-sim)";
    case ncclInternalError:
      return "internal error (or the communicator was aborted)";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t) { return gpusim::nccl::t_last_error.c_str(); }

}  // extern "C"
