// Checkpoint directories: listing, `latest`, and choosing and loading the checkpoint to resume.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <regex>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/collective.hpp"
#include "checkpoint/directory.hpp"
#include "checkpoint/format.hpp"
#include "core/log.hpp"
#include "core/regular_file.hpp"
#include "core/slurm_env.hpp"

namespace fs = std::filesystem;

namespace trident {

using namespace ckpt;

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  static const std::regex pattern(R"(step_(\d+)\.h5)");
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    std::smatch m;
    if (std::regex_match(name, m, pattern) && e.is_regular_file(ec))
      found.push_back({std::stoll(m[1].str()), e.path().string()});
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

namespace {

// `latest` holds one short line; a larger file is not one trident wrote.
constexpr size_t kMaxLatestBytes = 4096;

// Up to 64 characters of `text` for a message, with anything unprintable shown as '?'.
std::string printable_prefix(const std::string& text) {
  std::string out;
  for (const char ch : text.substr(0, 64)) out += std::isprint(static_cast<unsigned char>(ch)) ? ch : '?';
  return text.size() > 64 ? out + "..." : out;
}

}  // namespace

std::string latest_checkpoint(const std::string& dir) {
  const fs::path path = fs::path(dir) / ckpt::kLatestName;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return "";
  std::string name;
  try {
    name = read_small_file(path.string(), kMaxLatestBytes);
  } catch (const Error& e) {
    throw CheckpointError(fmt::format("{} is not usable: {}", path.string(), e.what()));
  }
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  if (name.empty()) return "";
  static const std::regex file_name(R"(step_\d+\.h5)");
  if (!std::regex_match(name, file_name))
    throw CheckpointError(fmt::format("{} is not usable: it holds \"{}\", not the name of a checkpoint file of {} "
                                      "(step_N.h5; `latest` never names a file elsewhere)",
                                      path.string(), printable_prefix(name), dir));
  return (fs::path(dir) / name).string();
}

std::string resolve_checkpoint(const std::string& file_or_dir) {
  std::error_code ec;
  if (!fs::is_directory(file_or_dir, ec)) return file_or_dir;
  std::string latest;
  try {
    latest = latest_checkpoint(file_or_dir);
  } catch (const CheckpointError& e) {
    log::root_warn("checkpoint: {}; going by the checkpoint files instead", e.what());  // every rank reads it alike
  }
  if (!latest.empty() && fs::is_regular_file(latest, ec)) return latest;
  const auto all = list_checkpoints(file_or_dir);
  if (all.empty()) throw CheckpointError(fmt::format("{}: no checkpoint in this directory", file_or_dir));
  if (!latest.empty())
    log::root_warn("checkpoint: {}/latest names {}, which does not exist; using the newest file, {}", file_or_dir,
                   latest, all.front());
  return all.front();
}

namespace {

// The checkpoints of dir in the order resume tries them: newest first by the step they hold (the
// manifest's; the name's when there is none), so a stray copy (step_99999999.h5 holding step 2) is
// tried where its content belongs. The reasons of such copies are appended to `strays`.
std::vector<std::string> resume_candidates(const std::string& dir, std::vector<std::string>* strays) {
  auto all = scan_checkpoints(dir);
  std::stable_sort(all.begin(), all.end(), [](const StoredCheckpoint& a, const StoredCheckpoint& b) {
    return a.content_step.value_or(a.name_step) > b.content_step.value_or(b.name_step);
  });
  std::vector<std::string> out;
  for (const auto& c : all) {
    out.push_back(c.path);
    if (c.stray() && strays) strays->push_back(stray_reason(c));
  }
  return out;
}

// The directory checkpoint.resume searches.
std::string searched_dir(const CheckpointConfig& c) {
  return c.resume == "auto" || c.resume == "required" ? c.dir : c.resume;
}

// Why finding no checkpoint must stop the run; "" when it may start fresh. A Slurm job restarted
// (requeued) after its first run trained must find that run's checkpoints: starting over from step 0
// would silently repeat the work, and the missing directory usually means a wrong path.
std::string no_checkpoint_refusal(const CheckpointConfig& c) {
  if (c.resume == "required")
    return fmt::format("[checkpoint] resume = \"required\", but {} holds no checkpoint; refusing to start fresh", c.dir);
  if (c.resume != "auto") return fmt::format("{}: no checkpoint in this directory", c.resume);
  const auto job = slurm_job();
  if (!job || job->restart_count == 0 || c.allow_fresh_restart) return "";
  return fmt::format("this is restart {} of Slurm job {}, but [checkpoint] dir = \"{}\" holds no checkpoint (deleted "
                     "or moved, or the deck now names another directory): refusing to start over from step 0. "
                     "Restore the checkpoints, or set checkpoint.allow_fresh_restart = true to start fresh",
                     job->restart_count, job->job_id, c.dir);
}

}  // namespace

std::string find_resume_checkpoint(const CheckpointConfig& cfg, std::vector<std::string>* skipped) {
  if (cfg.resume == "never") return "";
  std::error_code ec;
  const bool in_dir = cfg.resume == "auto" || cfg.resume == "required";
  if (!in_dir && !fs::is_directory(cfg.resume, ec)) {
    read_checkpoint_header(cfg.resume);  // throws when invalid
    return cfg.resume;
  }
  const std::string dir = searched_dir(cfg);
  if (dir.empty()) return "";
  const auto all = list_checkpoints(dir);
  for (const auto& c : resume_candidates(dir, nullptr)) {
    try {
      read_checkpoint_header(c);
      return c;
    } catch (const CheckpointError& e) {
      if (skipped) skipped->push_back(e.what());
    }
  }
  if (!all.empty()) throw CheckpointError(fmt::format("{}: none of its {} checkpoints is valid", dir, all.size()));
  if (cfg.resume != "auto") throw CheckpointError(fmt::format("{}: no checkpoint in this directory", dir));
  return "";
}

std::optional<ResumePoint> resume_checkpoint(const Config& cfg, const std::vector<RankShard>& shards, MPI_Comm comm) {
  const auto& c = cfg.checkpoint;
  if (c.resume == "never") return std::nullopt;
  bool explicit_file = false;
  std::string dir;
  std::vector<std::string> candidates;
  std::string err;
  if (comm_rank(comm) == 0) {
    std::error_code ec;
    if (c.resume == "auto" || c.resume == "required") {
      dir = c.dir;
    } else if (fs::is_directory(c.resume, ec)) {
      dir = c.resume;
    } else {
      explicit_file = true;
      candidates = {c.resume};
    }
    std::vector<std::string> strays;
    if (!dir.empty()) candidates = resume_candidates(dir, &strays);
    for (const auto& reason : strays) log::warn("checkpoint: {}: ordered by the step it holds", reason);
    if (candidates.empty()) err = no_checkpoint_refusal(c);
  }
  agree(comm, err);
  std::string joined = fmt::format("{}", fmt::join(candidates, "\n"));
  bcast_string(joined, comm);
  int flag = explicit_file;
  MPI_Bcast(&flag, 1, MPI_INT, 0, comm);
  explicit_file = flag != 0;
  candidates.clear();
  for (size_t p = 0; !joined.empty();) {
    const size_t q = joined.find('\n', p);
    candidates.push_back(joined.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  if (candidates.empty()) {
    if (!c.dir.empty()) log::info("checkpoint: no checkpoint in {}: starting fresh", c.dir);
    return std::nullopt;
  }

  ResumePoint rp;
  for (size_t i = 0; i < candidates.size(); ++i) {
    try {
      rp.header = load_checkpoint(candidates[i], cfg, shards, comm);
      if (!rp.skipped.empty())
        log::info("checkpoint: resumed from {} after passing over {} damaged newer checkpoint(s)", candidates[i],
                  rp.skipped.size());
      return rp;
    } catch (const CheckpointError& e) {
      if (explicit_file) throw;
      rp.skipped.push_back(e.what());
      if (comm_rank(comm) == 0)
        log::warn("checkpoint: {} is not usable: {}; {}", candidates[i], e.what(),
                  i + 1 < candidates.size() ? fmt::format("falling back to the previous checkpoint, {}", candidates[i + 1])
                                            : std::string("no older checkpoint left"));
    }
  }
  throw CheckpointError(fmt::format("{}: none of its {} checkpoint(s) is valid ({}); refusing to start fresh over "
                                    "them: remove or move them, or set checkpoint.resume = \"never\"",
                                    searched_dir(c), candidates.size(),
                                    fmt::join(rp.skipped, "; ")));
}

}  // namespace trident
