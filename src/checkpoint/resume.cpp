// Checkpoint directories: listing, `latest`, and choosing and loading the checkpoint to resume.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/collective.hpp"
#include "checkpoint/directory.hpp"
#include "checkpoint/format.hpp"
#include "core/log.hpp"

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

std::string latest_checkpoint(const std::string& dir) {
  std::ifstream f(fs::path(dir) / ckpt::kLatestName);
  if (!f) return "";
  std::string name;
  std::getline(f, name);
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  if (name.empty()) return "";
  return (fs::path(dir) / name).string();
}

std::string resolve_checkpoint(const std::string& file_or_dir) {
  std::error_code ec;
  if (!fs::is_directory(file_or_dir, ec)) return file_or_dir;
  const std::string latest = latest_checkpoint(file_or_dir);
  if (!latest.empty() && fs::exists(latest, ec)) return latest;
  const auto all = list_checkpoints(file_or_dir);
  if (all.empty()) throw CheckpointError(fmt::format("{}: no checkpoint in this directory", file_or_dir));
  if (!latest.empty())
    log::warn("checkpoint: {}/latest names {}, which does not exist; using the newest file, {}", file_or_dir, latest,
              all.front());
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

}  // namespace

std::string find_resume_checkpoint(const CheckpointConfig& cfg, std::vector<std::string>* skipped) {
  if (cfg.resume == "never") return "";
  std::error_code ec;
  if (cfg.resume != "auto" && !fs::is_directory(cfg.resume, ec)) {
    read_checkpoint_header(cfg.resume);  // throws when invalid
    return cfg.resume;
  }
  const std::string dir = cfg.resume == "auto" ? cfg.dir : cfg.resume;
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
    if (c.resume == "auto") {
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
    if (c.resume != "auto" && candidates.empty()) err = fmt::format("{}: no checkpoint in this directory", c.resume);
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
                                    c.resume == "auto" ? c.dir : c.resume, candidates.size(),
                                    fmt::join(rp.skipped, "; ")));
}

}  // namespace trident
