// `trident ckpt list|inspect|verify|export`: the checkpoint tools. They run on one rank (world rank
// 0; under mpiexec the other ranks wait) with serial HDF5 access.
#include <mpi.h>

#include <fmt/ranges.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>

#include "app/commands.hpp"
#include "checkpoint/checkpoint.hpp"
#include "core/error.hpp"

namespace fs = std::filesystem;

namespace trident {
namespace {

struct CkptArgs {
  std::string dir, ckpt, out;
  std::string dtype = "fp32";  // export: fp32 or bf16
  bool deck = false;
};

// Runs body on world rank 0; the other ranks wait. An error ends the job (exit 2) with its message.
template <class F>
void on_rank0(F body) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) body();
  MPI_Barrier(MPI_COMM_WORLD);
}

void run_list(const CkptArgs& a) {
  std::error_code ec;
  if (!fs::is_directory(a.dir, ec)) throw Error(fmt::format("{}: not a directory", a.dir));
  const auto all = list_checkpoints(a.dir);
  std::string latest, latest_problem;
  try {
    latest = latest_checkpoint(a.dir);
  } catch (const CheckpointError& e) {
    latest_problem = e.what();
  }
  std::cout << fmt::format("{} checkpoint(s) in {}{}\n", all.size(), a.dir,
                           latest.empty() ? "" : fmt::format(" (latest: {})", fs::path(latest).filename().string()));
  for (const auto& path : all) {
    const auto size = fs::file_size(path, ec);
    std::string status, info;
    try {
      const CheckpointHeader h = read_checkpoint_header(path);
      status = "ok";
      info = fmt::format("step {:>8}  loss {:<10}  tp {} pp {} dp {}  {}", h.progress.step,
                         std::isfinite(h.progress.loss) ? fmt::format("{:.4f}", h.progress.loss) : std::string("n/a"),
                         h.layout.tp, h.layout.pp, h.layout.dp, h.created_utc);
      if (fs::path(path).filename().string() != checkpoint_file_name(h.progress.step))
        info += "  (its name says another step: a renamed or stray copy)";
    } catch (const CheckpointError& e) {
      status = "INVALID";
      info = e.what();
    }
    const bool is_latest = !latest.empty() && fs::equivalent(latest, path, ec);
    std::cout << fmt::format("  {:<24} {:>10.1f} MiB  {:<7}  {}{}\n", fs::path(path).filename().string(),
                             double(size) / 1048576.0, status, info, is_latest ? "  <- latest" : "");
  }
  if (!latest.empty() && !fs::exists(latest, ec))
    std::cout << fmt::format("  latest names {}, which does not exist\n", fs::path(latest).filename().string());
  if (!latest_problem.empty()) std::cout << fmt::format("  {}\n", latest_problem);
  for (const auto& e : fs::directory_iterator(a.dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() > 7 && name.rfind("step_", 0) == 0 && name.substr(name.size() - 7) == ".h5.tmp")
      std::cout << fmt::format("  {:<24} incomplete (an interrupted write; ignored, deleted by the next write)\n", name);
  }
}

void run_inspect(const CkptArgs& a) {
  const CheckpointHeader h = read_checkpoint_header(resolve_checkpoint(a.ckpt));
  std::cout << describe_checkpoint(h, a.deck);
}

void run_verify(const CkptArgs& a) {
  const std::string path = resolve_checkpoint(a.ckpt);
  const auto verdicts = verify_checkpoint(path);
  std::vector<std::string> bad;
  for (const auto& v : verdicts) {
    if (v.ok) continue;
    bad.push_back(v.dataset);
    if (!v.error.empty())
      std::cout << fmt::format("FAILED   {}: {}\n", v.dataset, v.error);
    else
      std::cout << fmt::format("FAILED   {}: checksum {:016x}, stored {:016x}\n", v.dataset, v.actual, v.expected);
  }
  if (!bad.empty())
    throw CheckpointError(fmt::format("{}: {} of {} datasets failed verification: {}", path, bad.size(),
                                      verdicts.size(), fmt::join(bad, ", ")));
  std::cout << fmt::format("{}: all {} checksums verified\n", path, verdicts.size());
}

// What the export says of the run's tokenizer.
std::string tokenizer_note(Tokenizer t) {
  switch (t) {
    case Tokenizer::Gpt2: return "GPT-2's BPE, its files written";
    case Tokenizer::Bytes: return "bytes: the ids are the text's bytes; Hugging Face has no tokenizer for that";
    default: return "none known (set [data] tokenizer in the training deck)";
  }
}

void run_export(const CkptArgs& a) {
  const ExportResult r = export_checkpoint(a.ckpt, a.out, a.dtype == "bf16");
  std::cout << fmt::format("exported {} to {} ({}): {}; tokenizer: {}\n", r.checkpoint, a.out, a.dtype,
                           fmt::join(r.files, ", "), tokenizer_note(r.tokenizer));
}

}  // namespace

void add_ckpt_command(CLI::App& app) {
  auto args = std::make_shared<CkptArgs>();
  auto* ckpt = app.add_subcommand("ckpt", "Checkpoint tools: list, inspect, verify, export");
  ckpt->require_subcommand(1);

  auto* list = ckpt->add_subcommand("list", "List the checkpoints of a directory, newest first, with their validity");
  list->add_option("dir", args->dir, "Checkpoint directory (checkpoint.dir)")->required();
  list->callback([args] { on_rank0([&] { run_list(*args); }); });

  auto* inspect = ckpt->add_subcommand("inspect", "Show a checkpoint's step, model, layout, scalars and datasets");
  inspect->add_option("ckpt", args->ckpt, "Checkpoint file, or a directory (its latest)")->required();
  inspect->add_flag("--deck", args->deck, "Also print the resolved deck it was written with");
  inspect->callback([args] { on_rank0([&] { run_inspect(*args); }); });

  auto* verify = ckpt->add_subcommand("verify", "Re-read every dataset and check its checksum (exit 2 naming the damaged ones)");
  verify->add_option("ckpt", args->ckpt, "Checkpoint file, or a directory (its latest)")->required();
  verify->callback([args] { on_rank0([&] { run_verify(*args); }); });

  auto* exp = ckpt->add_subcommand(
      "export", "Write model.safetensors (Hugging Face names and layout, fp32 or bf16) and config.json (GPT2LMHeadModel or LlamaForCausalLM)");
  exp->add_option("ckpt", args->ckpt, "Checkpoint file, or a directory (its latest)")->required();
  exp->add_option("--out", args->out, "Output directory")->required();
  exp->add_option("--dtype", args->dtype,
                  "fp32 (the checkpoint's values) or bf16 (each rounded to nearest even: half the bytes)")
      ->check(CLI::IsMember({"fp32", "bf16"}))
      ->default_val("fp32");
  exp->callback([args] { on_rank0([&] { run_export(*args); }); });
}

}  // namespace trident
