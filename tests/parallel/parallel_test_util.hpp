#pragma once
// Shared set-up for the parallel-equivalence tests: a small GPT deck, a token file, a serial run of
// the same deck on this rank for reference, whole-model views of a (sharded) model, and the
// comparison of a parallel run with the serial one.
//
// One test source, several transports, chosen by TRIDENT_TEST_TRANSPORT (tests/parallel/CMakeLists.txt):
//   unset        the cpu backend, MPI on host memory;
//   host-staged  the cpu backend with every group on the host-staged transport (memcpy for the device
//                copies), so that its logic runs under every scheme without a GPU;
//   gpu-staged   runtime.backend = "cuda", runtime.comm = "mpi": all ranks share the machine's GPU;
//   gpu-nccl     runtime.backend = "cuda", runtime.comm = "nccl": one GPU per rank.
// On the GPU every deck gets those keys, the serial reference included, and the suite skips, visibly,
// without a GPU (or, over NCCL, with fewer GPUs than ranks).
#include <map>
#include <string>
#include <vector>

#include "comm/mesh.hpp"
#include "deck/deck.hpp"
#include "train/trainer.hpp"

namespace trident::test {

// A deck for a 2-layer GPT (hidden 64, 4 heads, seq 16) on an llm.c shard of random tokens written
// to a per-process temporary directory (also its validation data); `overrides` are --set style.
Config small_deck(int64_t vocab, const std::vector<std::string>& overrides);

// True when the suites run on the GPU (TRIDENT_TEST_TRANSPORT=gpu-...).
bool on_gpu();
// The process's one compute queue for the suites (released when the tests end).
Kernels& test_kernels();
// Gives the mesh's groups the tensor transport of cfg on test_kernels(), once per mesh.
void connect(ParallelMesh& mesh, const Config& cfg);

using TensorsByName = std::map<std::string, std::vector<float>>;

// Gradients are kept for the first kGradientSteps steps of a run.
inline constexpr int64_t kGradientSteps = 3;

// Per-step losses, the whole-model gradients (as the optimizer sees them: reduced, unpadded, by
// Hugging Face name) of the first kGradientSteps steps, the parameters after the last step (a rank
// of a pipelined run holds only its stages' tensors), and the validation loss after the last step.
struct RunResult {
  std::vector<double> losses;
  std::vector<double> grad_norms;
  std::vector<TensorsByName> grads;  // grads[s]: after step s + 1
  TensorsByName final_params;
  double val_loss = 0;
  std::vector<std::string> finishing_phases;  // of the last step (train/gradient_finisher.hpp)
};
RunResult run_steps(const Config& cfg, ParallelMesh* mesh, int64_t steps);
// The serial run of `cfg` (no mesh), computed once per process for each resolved deck and step count:
// several layouts share one reference.
const RunResult& serial_run(const Config& cfg, int64_t steps);

// Relative L2 distance ||a - b|| / ||b|| (0 when both are zero).
double relative_l2(const std::vector<float>& a, const std::vector<float>& b);

// Bounds on how far a parallel run may be from the serial run of the same model.
struct Tolerance {
  double loss = 1e-5;            // per-step loss, gradient norm and validation loss, relative
  double gradient = 1e-5;        // every gradient tensor of step 1 (the same weights), relative L2
  double later_gradient = 1e-5;  // of steps 2..kGradientSteps (weights already apart by rounding)
  float parameter = 1e-5f;       // every parameter element after the last step, absolute
};

// Every loss (validation loss included), gradient norm, gradient and final parameter `par` holds is
// within `tol` of `serial`'s.
// The largest deviations seen are printed when TRIDENT_TEST_REPORT_ERRORS is set (to measure bounds).
void expect_matches_serial(const RunResult& par, const RunResult& serial, const Tolerance& tol);

// A layout of a suite: its rank count and --set values, mesh.* (the layout itself) and model or train
// keys (which its serial run takes too).
struct NamedLayout {
  std::string name;
  int ranks;
  std::vector<std::string> sets;
};

// Each layout with this job's rank count, on small_deck(1009, base + its sets), against the serial run
// of that deck without the mesh.* keys, for 5 steps, within `tol`. Returns how many layouts ran.
int expect_layouts_match_serial(const std::vector<NamedLayout>& layouts, const std::vector<std::string>& base,
                                const Tolerance& tol);

}  // namespace trident::test
