// Deck fuzzing: seeded mutations of the example decks (input/*.toml) go through what `trident check`
// does (read the file, validate, count parameters, estimate memory) and what `train` does before it
// allocates (partition the layers, the memory check). Every case runs in a forked child with a time
// limit, so a crash or a hang is counted rather than ending the suite. A case may be accepted or end in
// a clean deck error (trident::Error); an internal error (any other exception), a crash or a hang
// fails the test, which prints each such case's seed and mutation to reproduce it.
//
//   TRIDENT_FUZZ_CASES (default 300), TRIDENT_FUZZ_SEED (default 17) run more or other cases.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/memory_check.hpp"
#include "common/test_support.hpp"
#include "core/error.hpp"
#include "deck/schema.hpp"
#include "pipeline/partition.hpp"

namespace trident {
namespace {

constexpr int kCaseSeconds = 10;  // a case still running after this is a hang

enum Outcome { Accepted = 0, CleanError = 2, InternalError = 3 };

// Values that have broken parsers: type confusion, boundaries of int32/int64/double/float, NaN.
const std::vector<std::string> kValues = {
    "0", "1", "-1", "2", "3", "7", "64", "1000000", "2147483647", "2147483648", "-2147483648",
    "9223372036854775807", "-9223372036854775808", "9007199254740993", "4294967296", "0.0", "-0.0", "0.5",
    "0.99999999", "1.0", "1e-50", "1e308", "-1e308", "inf", "-inf", "nan", "true", "false", "\"\"", "\"x\"",
    "\"1f1b\"", "\"interleaved\"", "\"/nonexistent/file\"", "[]", "[1]", "[1, 2]", "[9223372036854775807, 1]",
    "[0, 0]", "[\"a\"]", "{}", "{a = 1}", "1979-05-27", "\"tp-dp-pp\"", "\"pp-dp-tp\"", "\"full\"", "\"cuda\""};

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

struct Case {
  std::string text;
  std::vector<std::string> overrides;
  std::string description;
};

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  // One to three odd key values, and in one case of three also a damaged text: most cases stay
  // syntactically valid so that they reach validation and the later stages.
  Case make(const std::vector<std::string>& seeds) {
    Case c{seeds[pick(seeds.size())], {}, ""};
    const int values = 1 + int(pick(3));
    for (int e = 0; e < values; ++e) set_odd_value(c);
    if (pick(3) == 0) damage_text(c);
    return c;
  }

 private:
  std::mt19937_64 rng_;
  size_t pick(size_t n) { return size_t(rng_() % n); }

  void set_odd_value(Case& c) {
    const auto& keys = deck::schema();
    const auto& k = keys[pick(keys.size())];
    const std::string o = k.section + "." + k.key + "=" + kValues[pick(kValues.size())];
    c.overrides.push_back(o);
    c.description += " --set " + o;
  }

  void damage_text(Case& c) {
    switch (pick(3)) {
      case 0: {  // a line deleted or duplicated
        auto lines = split(c.text);
        if (lines.empty()) break;
        const size_t i = pick(lines.size());
        const bool dup = pick(2);
        c.description += fmt::format(" {} line {}", dup ? "duplicate" : "delete", i + 1);
        if (dup) lines.insert(lines.begin() + long(i), lines[i]);
        else lines.erase(lines.begin() + long(i));
        c.text = join(lines);
        break;
      }
      case 1: {  // a byte changed to one of TOML's structural characters or a control byte
        if (c.text.empty()) break;
        const size_t i = pick(c.text.size());
        const char bytes[] = {'[', ']', '=', '"', '\'', '\n', '#', '.', '{', '}', '\0', '\x7f', '-', '9'};
        c.text[i] = bytes[pick(sizeof bytes)];
        c.description += fmt::format(" byte {} -> {}", i, int(c.text[i]));
        break;
      }
      default: {  // truncated
        const size_t at = pick(c.text.size() + 1);
        c.text.resize(at);
        c.description += fmt::format(" truncate at {}", at);
      }
    }
  }

  static std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> lines;
    std::istringstream in(s);
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    return lines;
  }
  static std::string join(const std::vector<std::string>& lines) {
    std::string s;
    for (const auto& l : lines) s += l + "\n";
    return s;
  }
};

// The process's virtual size (/proc/self/statm, first field, in pages).
rlim_t mapped_bytes() {
  std::ifstream statm("/proc/self/statm");
  rlim_t pages = 0;
  statm >> pages;
  return pages * rlim_t(sysconf(_SC_PAGESIZE));
}

// In the child: `trident check`'s work, then what `train` computes from the deck before allocating.
[[noreturn]] void run_case(const std::string& path, const std::string& err_path, const Case& c) {
  alarm(kCaseSeconds);
  // Address space: a runaway allocation fails instead of swapping. The limit is 4 GiB beyond what is
  // mapped now, not 4 GiB in all: under AddressSanitizer the shadow memory alone maps terabytes.
  const rlim_t limit = mapped_bytes() + (rlim_t(4) << 30);
  const rlimit rl{limit, limit};
  setrlimit(RLIMIT_AS, &rl);
  if (!freopen("/dev/null", "w", stdout) || !freopen(err_path.c_str(), "w", stderr)) _exit(InternalError);
  try {
    CheckArgs check;
    check.deck = path;
    check.overrides = c.overrides;
    check.deck_only = true;  // the deck's own validation; data and build features are not what is fuzzed
    run_check(check);
    const Config cfg = load_deck(path, c.overrides);
    partition_layers(cfg);
    estimated_rank_bytes(cfg);
    _exit(Accepted);
  } catch (const Error&) {
    _exit(CleanError);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    _exit(InternalError);
  }
}

struct Counts {
  int cases = 0, accepted = 0, clean_errors = 0, internal_errors = 0, crashes = 0, hangs = 0;
};

TEST(DeckFuzz, NoCrashHangOrInternalError) {
  const char* n_env = std::getenv("TRIDENT_FUZZ_CASES");
  const char* seed_env = std::getenv("TRIDENT_FUZZ_SEED");
  const int n = n_env ? std::atoi(n_env) : 300;
  const uint64_t seed = seed_env ? std::strtoull(seed_env, nullptr, 10) : 17;
  std::vector<std::string> seeds;
  for (const auto& e : std::filesystem::directory_iterator(TRIDENT_INPUT_DIR))
    if (e.path().extension() == ".toml") seeds.push_back(read_text(e.path().string()));
  ASSERT_GE(seeds.size(), 3u) << "example decks not found in " << TRIDENT_INPUT_DIR;

  const std::string dir = test::make_temp_dir("trident-fuzz");
  Mutator mutator(seed);
  Counts counts;
  std::vector<std::string> failures;
  for (int i = 0; i < n; ++i) {
    const Case c = mutator.make(seeds);
    const std::string path = dir + "/case.toml";
    test::write_file(path, c.text);
    std::fflush(nullptr);
    const pid_t pid = fork();
    const std::string err_path = dir + "/case.err";
    if (pid == 0) run_case(path, err_path, c);
    int status = 0;
    waitpid(pid, &status, 0);
    ++counts.cases;
    std::string failure;
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
      ++counts.hangs;
      failure = fmt::format("hang (> {} s)", kCaseSeconds);
    } else if (WIFSIGNALED(status)) {
      ++counts.crashes;
      failure = fmt::format("crash (signal {})", WTERMSIG(status));
    } else if (WEXITSTATUS(status) == Accepted) {
      ++counts.accepted;
    } else if (WEXITSTATUS(status) == CleanError) {
      ++counts.clean_errors;
    } else {
      ++counts.internal_errors;
      failure = fmt::format("internal error (exit {})", WEXITSTATUS(status));
    }
    if (!failure.empty()) {
      const std::string kept = fmt::format("{}/failed-{}.toml", dir, i);
      std::filesystem::copy_file(path, kept, std::filesystem::copy_options::overwrite_existing);
      failures.push_back(fmt::format("case {} (seed {}): {}: {}{}\n{}", i, seed, failure, kept, c.description,
                                     read_text(err_path)));
    }
  }
  std::printf("[ fuzz ] seed %llu: %d cases: %d accepted, %d clean errors, %d internal errors, %d crashes, %d hangs\n",
              static_cast<unsigned long long>(seed), counts.cases, counts.accepted, counts.clean_errors,
              counts.internal_errors, counts.crashes, counts.hangs);
  for (const auto& f : failures) ADD_FAILURE() << f;
  // A suite whose mutations were all rejected at the first byte would prove little.
  EXPECT_GT(counts.accepted, n / 50) << "too few mutated decks pass validation to reach check's later stages";
  EXPECT_GT(counts.clean_errors, n / 4);
}

}  // namespace
}  // namespace trident
