// gpu-sim's CUDA runtime: devices (an H100 SXM's properties, CUDA_VISIBLE_DEVICES), memory (the
// registry behind direction checks, page-locked vs pageable copies, cudaFree waiting for the device),
// streams that run concurrently, events and cross-stream waits, the legacy default stream's implicit
// ordering, and sticky errors. Timing-based checks use margins of 10x or more.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

cudaStream_t make_stream(unsigned flags = cudaStreamNonBlocking) {
  cudaStream_t s = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&s, flags), cudaSuccess);
  return s;
}

void CUDART_CB sleep_ms(void* ms) { std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<int*>(ms))); }

// A host function that blocks its stream until the flag is set.
void CUDART_CB wait_for_flag(void* flag) {
  while (!static_cast<std::atomic<bool>*>(flag)->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

int g_sleep_100 = 100;
int g_sleep_300 = 300;

// ---- devices ----

TEST(GpuSimDevices, EightH100sPerNodeByDefault) {
  ASSERT_EQ(std::getenv("CUDA_VISIBLE_DEVICES"), nullptr);
  int n = 0;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  EXPECT_EQ(n, 8);
  cudaDeviceProp p{};
  ASSERT_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess);
  EXPECT_EQ(p.major, 9);
  EXPECT_EQ(p.minor, 0);
  EXPECT_EQ(p.multiProcessorCount, 132);
  EXPECT_EQ(p.warpSize, 32);
  EXPECT_EQ(p.maxThreadsPerBlock, 1024);
  EXPECT_EQ(p.sharedMemPerBlock, size_t(48) << 10);
  EXPECT_EQ(p.sharedMemPerBlockOptin, size_t(227) << 10);
  EXPECT_GT(p.totalGlobalMem, size_t(79) << 30);
  int clock = 0, sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&clock, cudaDevAttrClockRate, 0), cudaSuccess);
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  EXPECT_EQ(clock, 1980000);
  EXPECT_EQ(sms, 132);
  // Distinct devices, told apart by PCI bus and UUID.
  cudaDeviceProp q{};
  ASSERT_EQ(cudaGetDeviceProperties(&q, 7), cudaSuccess);
  EXPECT_NE(p.pciBusID, q.pciBusID);
  EXPECT_NE(std::memcmp(p.uuid.bytes, q.uuid.bytes, 16), 0);
  EXPECT_EQ(cudaSetDevice(8), cudaErrorInvalidDevice);
  cudaGetLastError();
}

// Run alone with CUDA_VISIBLE_DEVICES=5,2,9,1 (gpusim/tests/CMakeLists.txt): the list ends at 9, which
// names no device, so two devices are visible, in that order.
TEST(GpuSimEnv, VisibleDevicesPickAndOrderThem) {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  ASSERT_NE(v, nullptr);
  ASSERT_STREQ(v, "5,2,9,1");
  int n = 0;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  EXPECT_EQ(n, 2);
  int bus0 = 0, bus1 = 0;
  cudaDeviceGetAttribute(&bus0, cudaDevAttrPciBusId, 0);
  cudaDeviceGetAttribute(&bus1, cudaDevAttrPciBusId, 1);
  EXPECT_EQ(bus0, 0xab) << "physical GPU 5 of an HGX board";
  EXPECT_EQ(bus1, 0x3a) << "physical GPU 2";
}

// ---- memory ----

TEST(GpuSimMemory, NewDeviceMemoryReadsAsNanAndIsAccounted) {
  size_t free0 = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 1 << 20), cudaSuccess);
  size_t free1 = 0;
  cudaMemGetInfo(&free1, &total);
  EXPECT_EQ(free0 - free1, size_t(1) << 20);
  std::vector<float> h(4);
  ASSERT_EQ(cudaMemcpy(h.data(), d, sizeof(float) * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (float x : h) EXPECT_TRUE(std::isnan(x)) << "never-written device memory must not look like data";
  ASSERT_EQ(cudaFree(d), cudaSuccess);
  cudaMemGetInfo(&free1, &total);
  EXPECT_EQ(free1, free0);
}

TEST(GpuSimMemory, CopiesAreCheckedAgainstTheirDirection) {
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, 64 * sizeof(float)), cudaSuccess);
  std::vector<float> h(128);
  EXPECT_EQ(cudaMemcpy(h.data(), h.data() + 64, 64, cudaMemcpyHostToDevice), cudaErrorInvalidValue)
      << "host memory as the destination of a host-to-device copy";
  EXPECT_EQ(cudaMemcpy(h.data(), d, 128 * sizeof(float), cudaMemcpyDeviceToHost), cudaErrorInvalidValue)
      << "a copy past the end of the allocation";
  EXPECT_EQ(cudaMemcpy(d, h.data(), 64 * sizeof(float), cudaMemcpyDeviceToHost), cudaErrorInvalidValue)
      << "device memory as the destination of a device-to-host copy";
  EXPECT_EQ(cudaMemset(h.data(), 0, 16), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 64 * sizeof(float), cudaMemcpyDefault), cudaSuccess);
  EXPECT_EQ(cudaFree(h.data()), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(d + 1), cudaErrorInvalidValue);
  cudaGetLastError();
  cudaFree(d);
}

TEST(GpuSimMemory, PointerAttributes) {
  float *d = nullptr, *pinned = nullptr;
  cudaMalloc(&d, 64);
  cudaMallocHost(&pinned, 64);
  std::vector<float> pageable(16);
  cudaPointerAttributes a{};
  ASSERT_EQ(cudaPointerGetAttributes(&a, d + 3), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  ASSERT_EQ(cudaPointerGetAttributes(&a, pinned), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeHost);
  ASSERT_EQ(cudaPointerGetAttributes(&a, pageable.data()), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
  ASSERT_EQ(cudaHostRegister(pageable.data(), 64, cudaHostRegisterDefault), cudaSuccess);
  ASSERT_EQ(cudaPointerGetAttributes(&a, pageable.data()), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeHost);
  EXPECT_EQ(cudaHostRegister(pageable.data(), 64, 0), cudaErrorHostMemoryAlreadyRegistered);
  EXPECT_EQ(cudaHostUnregister(pageable.data()), cudaSuccess);
  EXPECT_EQ(cudaHostUnregister(pageable.data()), cudaErrorHostMemoryNotRegistered);
  cudaGetLastError();
  cudaFree(d);
  cudaFreeHost(pinned);
}

// From page-locked memory an async copy really is asynchronous: the host may (wrongly) change the
// source before the copy runs, and that change arrives. From pageable memory the call waits for the
// stream and copies before it returns, so the source may be reused at once.
TEST(GpuSimMemory, PageLockedCopiesAreAsyncAndPageableOnesSynchronise) {
  cudaStream_t s = make_stream();
  float* d = nullptr;
  cudaMalloc(&d, 2 * sizeof(float));
  float* pinned = nullptr;
  cudaMallocHost(&pinned, sizeof(float));
  std::atomic<bool> go{false};
  ASSERT_EQ(cudaLaunchHostFunc(s, wait_for_flag, &go), cudaSuccess);
  *pinned = 1.0f;
  auto t0 = Clock::now();
  ASSERT_EQ(cudaMemcpyAsync(d, pinned, sizeof(float), cudaMemcpyHostToDevice, s), cudaSuccess);
  EXPECT_LT(seconds_since(t0), 0.05) << "an async copy from page-locked memory returned only after the stream";
  *pinned = 2.0f;  // the copy has not run yet
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    go = true;
  });
  float pageable = 3.0f;
  t0 = Clock::now();
  ASSERT_EQ(cudaMemcpyAsync(d + 1, &pageable, sizeof(float), cudaMemcpyHostToDevice, s), cudaSuccess);
  EXPECT_GT(seconds_since(t0), 0.2) << "a copy from pageable memory must wait for the stream's earlier work";
  pageable = 4.0f;
  float out[2] = {};
  ASSERT_EQ(cudaMemcpyAsync(out, d, sizeof out, cudaMemcpyDeviceToHost, s), cudaSuccess);
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(out[1], 3.0f);
  release.join();
  cudaFree(d);
  cudaFreeHost(pinned);
  cudaStreamDestroy(s);
}

TEST(GpuSimMemory, FreeWaitsForTheDeviceAndFreeAsyncForItsStream) {
  cudaStream_t s = make_stream();
  float* d = nullptr;
  cudaMalloc(&d, 64);
  ASSERT_EQ(cudaLaunchHostFunc(s, sleep_ms, &g_sleep_300), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d, 0, 64, s), cudaSuccess);  // after the sleep
  const auto t0 = Clock::now();
  ASSERT_EQ(cudaFree(d), cudaSuccess);
  EXPECT_GT(seconds_since(t0), 0.2) << "cudaFree returned while queued work still used the memory";
  float* e = nullptr;
  ASSERT_EQ(cudaMallocAsync(&e, 64, s), cudaSuccess);
  ASSERT_EQ(cudaLaunchHostFunc(s, sleep_ms, &g_sleep_100), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(e, 0, 64, s), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(e, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaPointerAttributes a{};
  cudaPointerGetAttributes(&a, e);
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered) << "freed when the stream reached cudaFreeAsync";
  cudaStreamDestroy(s);
}

// ---- streams and events ----

TEST(GpuSimStreams, StreamsRunConcurrently) {
  cudaStream_t a = make_stream(), b = make_stream();
  std::atomic<bool> go{false};
  ASSERT_EQ(cudaLaunchHostFunc(a, wait_for_flag, &go), cudaSuccess);
  int* d = nullptr;
  cudaMalloc(&d, sizeof(int));
  ASSERT_EQ(cudaMemsetAsync(d, 0, sizeof(int), b), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess) << "b waited for a blocked stream";
  EXPECT_EQ(cudaStreamQuery(a), cudaErrorNotReady);
  go = true;
  EXPECT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(a), cudaSuccess);
  cudaFree(d);
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
  EXPECT_EQ(cudaStreamSynchronize(a), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
}

TEST(GpuSimStreams, AStreamWaitsForTheEventRecordOfTheTimeOfTheCall) {
  cudaStream_t a = make_stream(), b = make_stream(), c = make_stream();
  cudaEvent_t e = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess) << "never recorded: complete";
  std::atomic<bool> go{false};
  int* x = nullptr;
  cudaMalloc(&x, 2 * sizeof(int));
  cudaMemset(x, 0, 2 * sizeof(int));
  const int one = 1;
  ASSERT_EQ(cudaLaunchHostFunc(a, wait_for_flag, &go), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(x, &one, sizeof(int), cudaMemcpyHostToDevice, b), cudaSuccess);  // b: x[0] = 1
  // a: x[1] = x[0] (after the flag); c must see it through the event.
  int* pinned = nullptr;
  cudaMallocHost(&pinned, sizeof(int));
  *pinned = 7;
  ASSERT_EQ(cudaMemcpyAsync(x + 1, pinned, sizeof(int), cudaMemcpyHostToDevice, a), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(e, a), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e), cudaErrorNotReady);
  ASSERT_EQ(cudaStreamWaitEvent(c, e, 0), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(e, b), cudaSuccess);  // re-recorded: c still waits for a's record
  int out[2] = {};
  int* out_pinned = nullptr;
  cudaMallocHost(&out_pinned, 2 * sizeof(int));
  ASSERT_EQ(cudaMemcpyAsync(out_pinned, x, 2 * sizeof(int), cudaMemcpyDeviceToHost, c), cudaSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(cudaStreamQuery(c), cudaErrorNotReady) << "c ran before the event it waits for";
  go = true;
  ASSERT_EQ(cudaStreamSynchronize(c), cudaSuccess);
  std::memcpy(out, out_pinned, sizeof out);
  EXPECT_EQ(out[1], 7);
  cudaEventDestroy(e);
  cudaFree(x);
  cudaFreeHost(pinned);
  cudaFreeHost(out_pinned);
  for (cudaStream_t s : {a, b, c}) cudaStreamDestroy(s);
}

TEST(GpuSimStreams, EventTiming) {
  cudaStream_t s = make_stream();
  cudaEvent_t start = nullptr, stop = nullptr, untimed = nullptr;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming);
  cudaEventRecord(start, s);
  cudaLaunchHostFunc(s, sleep_ms, &g_sleep_100);
  cudaEventRecord(stop, s);
  cudaEventRecord(untimed, s);
  ASSERT_EQ(cudaEventSynchronize(stop), cudaSuccess);
  float ms = 0;
  ASSERT_EQ(cudaEventElapsedTime(&ms, start, stop), cudaSuccess);
  EXPECT_GE(ms, 99.0f);
  EXPECT_LT(ms, 5000.0f);
  EXPECT_EQ(cudaEventElapsedTime(&ms, start, untimed), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  for (cudaEvent_t e : {start, stop, untimed}) cudaEventDestroy(e);
  cudaStreamDestroy(s);
}

// The legacy default stream waits for blocking streams and they for it; non-blocking streams do not.
TEST(GpuSimStreams, LegacyDefaultStreamOrdersBlockingStreamsOnly) {
  cudaStream_t blocking = make_stream(cudaStreamDefault), nonblocking = make_stream(cudaStreamNonBlocking);
  std::atomic<bool> go{false};
  ASSERT_EQ(cudaLaunchHostFunc(nullptr, wait_for_flag, &go), cudaSuccess);
  int* d = nullptr;
  cudaMallocAsync(&d, 8, nonblocking);
  ASSERT_EQ(cudaMemsetAsync(d, 0, 4, nonblocking), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d, 0, 4, blocking), cudaSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(cudaStreamQuery(nonblocking), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(blocking), cudaErrorNotReady) << "a blocking stream ran past the NULL stream's work";
  go = true;
  EXPECT_EQ(cudaStreamSynchronize(blocking), cudaSuccess);
  cudaFree(d);
  cudaStreamDestroy(blocking);
  cudaStreamDestroy(nonblocking);
}

// Run alone with GPUSIM_STREAM_LAG_US=200000 (gpusim/tests/CMakeLists.txt): every op starts 0.2 s
// after it was queued, so work the host forgets to wait for is visibly not done.
TEST(GpuSimEnv, AStreamLagKeepsTheHostAhead) {
  ASSERT_NE(std::getenv("GPUSIM_STREAM_LAG_US"), nullptr);
  cudaStream_t s = make_stream();
  int* d = nullptr;
  cudaMalloc(&d, 4);
  const auto t0 = Clock::now();
  ASSERT_EQ(cudaMemsetAsync(d, 0, 4, s), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_GT(seconds_since(t0), 0.15);
  cudaFree(d);
  cudaStreamDestroy(s);
}

// Each host thread has its own current device; memory is accounted per device.
TEST(GpuSimDevices, CurrentDeviceIsPerHostThread) {
  int n = 0;
  cudaGetDeviceCount(&n);
  ASSERT_GE(n, 2);
  size_t free0_before = 0, free0_after = 0, total = 0;
  cudaMemGetInfo(&free0_before, &total);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  int seen = -1;
  std::thread([&] { cudaGetDevice(&seen); }).join();
  EXPECT_EQ(seen, 0);
  void* p = nullptr;
  cudaMalloc(&p, 1 << 20);
  cudaSetDevice(0);
  cudaMemGetInfo(&free0_after, &total);
  EXPECT_EQ(free0_after, free0_before) << "device 1's allocation counted on device 0";
  cudaFree(p);
}

}  // namespace
