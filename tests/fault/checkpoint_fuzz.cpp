// Seeded damage fuzzing of checkpoint files (issue #17): each case damages the newer of two
// checkpoints (bit flips anywhere or in HDF5's metadata, overwritten runs, zeroed blocks, truncation,
// appended bytes, a block copied over another) and, in a forked child process, reads it the way
// `ckpt list/inspect/verify` do and resumes the directory the way `trident train` does. The parent
// counts the outcomes and fails on any crash (a signal), hang (no answer within 20 s), internal
// error (an exception other than CheckpointError) or damaged file accepted; every damaged file must be
// refused naming it, and resume must fall back to the older checkpoint.
//   TRIDENT_FUZZ_CASES (default 300) and TRIDENT_FUZZ_SEED (default 17) choose the run; the counts
//   are printed ("fuzz: ...").
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/test_support.hpp"
#include "fault/checkpoint_fault_util.hpp"

namespace trident::test {
namespace {

// Exit codes of a case's child process.
enum Outcome : int {
  kUnchanged = 10,         // the damage happened to leave the bytes as they were
  kRefusedFellBack = 11,   // refused naming the file; resume loaded the older checkpoint
  kRefusedNoFallback = 12, // refused, but resume did not fall back correctly
  kAccepted = 13,          // damaged, and read as valid: silent corruption
  kInternalError = 14,     // an exception other than CheckpointError
};

struct Damage {
  std::string name;
  std::string bytes;
};

// One seeded damage of `intact`; metadata offsets come from `cls`.
Damage damage(const std::string& intact, const std::vector<ByteClass>& cls, std::mt19937_64& rng) {
  std::string b = intact;
  auto pick = [&](size_t n) { return size_t(rng() % std::max<size_t>(n, 1)); };
  std::vector<size_t> metadata;
  for (size_t i = 0; i < cls.size(); ++i)
    if (cls[i] != ByteClass::TensorData) metadata.push_back(i);
  switch (rng() % 8) {
    case 0: {
      const size_t i = pick(b.size());
      b[i] = char(b[i] ^ (1 << pick(8)));
      return {"bit flip", b};
    }
    case 1: {
      const size_t i = metadata[pick(metadata.size())];
      b[i] = char(b[i] ^ (1 << pick(8)));
      return {"metadata bit flip", b};
    }
    case 2: {
      for (size_t k = 1 + pick(8); k > 0; --k) {
        const size_t i = pick(b.size());
        b[i] = char(b[i] ^ (1 << pick(8)));
      }
      return {"several bit flips", b};
    }
    case 3: {
      const size_t at = metadata[pick(metadata.size())], n = 1 + pick(64);
      for (size_t i = at; i < std::min(b.size(), at + n); ++i) b[i] = char(rng());
      return {"overwritten run", b};
    }
    case 4: {
      const size_t at = pick(b.size()) / 512 * 512;
      std::fill(b.begin() + std::ptrdiff_t(at), b.begin() + std::ptrdiff_t(std::min(b.size(), at + 512)), '\0');
      return {"zeroed block", b};
    }
    case 5:
      b.resize(pick(b.size()));
      return {"truncated", b};
    case 6:
      for (size_t n = 1 + pick(4096); n > 0; --n) b.push_back(char(rng()));
      return {"appended bytes", b};
    default: {
      const size_t n = 1 + pick(256), from = pick(b.size() - n), to = pick(b.size() - n);
      b.replace(to, n, intact.substr(from, n));
      return {"block copied", b};
    }
  }
}

// The child: read the damaged file as the tools do, then resume the directory (MPI_COMM_SELF).
[[noreturn]] void run_case(const std::string& path, const std::string& intact, const std::string& damaged,
                           const TinyState& older, const std::string& dir) {
  int code = kInternalError;
  try {
    write_bytes(path, damaged);
    if (damaged == intact) std::_Exit(kUnchanged);
    std::string err;
    try {
      read_checkpoint_header(path);
      for (const auto& v : verify_checkpoint(path))
        if (!v.ok) err = path + ": dataset " + v.dataset;
    } catch (const CheckpointError& e) {
      err = e.what();
    }
    if (err.find(path) == std::string::npos) std::_Exit(kAccepted);
    Config cfg = older.cfg;
    cfg.checkpoint.dir = dir;
    cfg.checkpoint.resume = "auto";
    auto loaded = empty_like(older);
    const auto point = resume_checkpoint(cfg, loaded->shard, MPI_COMM_SELF);
    const bool fell_back = point && point->header.progress.step == 1 && point->skipped.size() == 1 &&
                           loaded->params == older.params && loaded->m == older.m;
    code = fell_back ? kRefusedFellBack : kRefusedNoFallback;
  } catch (const CheckpointError&) {
    code = kRefusedNoFallback;
  } catch (...) {
    code = kInternalError;
  }
  std::_Exit(code);
}

TEST(CheckpointFuzz, DamagedFilesAreRefusedWithoutCrashOrHang) {
  TRIDENT_REQUIRE_RANKS(1);
  const int cases = std::getenv("TRIDENT_FUZZ_CASES") ? std::atoi(std::getenv("TRIDENT_FUZZ_CASES")) : 300;
  const uint64_t seed = std::getenv("TRIDENT_FUZZ_SEED") ? std::strtoull(std::getenv("TRIDENT_FUZZ_SEED"), nullptr, 10) : 17;
  const auto older = tiny_state(1), newer = tiny_state(2);
  const std::string dir = shared_temp_dir("trident-fault-fuzz");
  write_tiny(*older, dir, 1);
  const std::string path = write_tiny(*newer, dir, 2);
  const std::string intact = read_bytes(path);
  const std::vector<ByteClass> cls = classify(path, intact);

  std::mt19937_64 rng(seed);
  std::map<std::string, int> counts;
  std::vector<std::string> failures;
  for (int c = 0; c < cases; ++c) {
    const Damage d = damage(intact, cls, rng);
    std::fflush(nullptr);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) run_case(path, intact, d.bytes, *older, dir);
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        status = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::string outcome;
    if (status == -1) outcome = "hang";
    else if (WIFSIGNALED(status)) outcome = "crash";
    else if (WEXITSTATUS(status) == kUnchanged) outcome = "unchanged";
    else if (WEXITSTATUS(status) == kRefusedFellBack) outcome = "refused+fallback";
    else if (WEXITSTATUS(status) == kRefusedNoFallback) outcome = "refused, no fallback";
    else if (WEXITSTATUS(status) == kAccepted) outcome = "accepted damaged";
    else outcome = "internal error";
    ++counts[outcome];
    if (outcome != "unchanged" && outcome != "refused+fallback")
      failures.push_back(fmt::format("case {} ({}): {}", c, d.name, outcome));
  }
  write_bytes(path, intact);
  std::printf("fuzz: seed %llu, %d cases: %d refused with a clear error and resumed from the older checkpoint, "
              "%d unchanged by the damage, %d refused without fallback, %d accepted damaged, %d internal errors, "
              "%d crashes, %d hangs\n",
              (unsigned long long)seed, cases, counts["refused+fallback"], counts["unchanged"],
              counts["refused, no fallback"], counts["accepted damaged"], counts["internal error"], counts["crash"],
              counts["hang"]);
  EXPECT_TRUE(failures.empty()) << fmt::format("{}", fmt::join(failures, "\n"));
  EXPECT_GT(counts["refused+fallback"], cases / 2);
}

}  // namespace
}  // namespace trident::test
