#include "deck/deck.hpp"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>

#include "core/error.hpp"
#include "deck/key_suggestions.hpp"
#include "deck/schema.hpp"
#include "deck/toml_text.hpp"

namespace trident {
namespace {

using deck::KeySpec;

// 2^47 elements: 100 times the largest models trained today, and byte counts of 16 per element with
// every multiplier the planner applies still fit in int64.
constexpr int64_t kMaxModelElements = int64_t(1) << 47;

// " did you mean 'x'?" when one candidate is close enough to be a typo.
std::string suggestion(const std::string& word, const std::vector<std::string>& candidates, const char* quote_open,
                       const char* quote_close) {
  const std::string best = closest_match(word, candidates);
  return best.empty() ? "" : fmt::format("; did you mean {}{}{}?", quote_open, best, quote_close);
}

std::string value_text(const toml::node& n) {
  if (n.is_floating_point()) return deck::toml_float(n.value<double>().value());
  if (n.is_string()) return deck::toml_string(n.value<std::string>().value());
  std::ostringstream os;
  n.visit([&](const auto& v) { os << v; });
  return os.str();
}

// Reads a deck (file text + overrides), remembering where each value came from.
class DeckReader {
 public:
  DeckReader(std::string source, const DeckOptions& options) : source_(std::move(source)), options_(options) {}

  Config read(const std::string& text, const std::vector<std::string>& overrides) {
    parse_text(text);
    for (const auto& o : overrides) apply_override(o);
    check_structure();
    Config cfg;
    cfg.source = source_;
    apply_values(cfg);
    resolve_derived(cfg);
    resolve_relative_paths(cfg);
    check_rules(cfg);
    cfg.resolved_toml = resolved_toml(cfg);
    return cfg;
  }

 private:
  std::string source_;
  DeckOptions options_;
  toml::table root_;
  std::map<std::string, std::string> override_text_;  // "section.key" -> "--set section.key=value"

  std::string location(const toml::node& n) const {
    const auto& b = n.source().begin;
    return fmt::format("{}:{}:{}", source_, b.line, b.column);
  }

  // Where a key itself is written (the key, not its value).
  std::string key_location(const toml::key& k, const toml::node& value) const {
    const auto& b = k.source().begin;
    return b.line > 0 ? fmt::format("{}:{}:{}", source_, b.line, b.column) : location(value);
  }

  // A section that exists only because of a --set names that argument.
  std::string section_location(const std::string& sec, const toml::node& node) const {
    for (const auto& [key, shown] : override_text_)
      if (key.compare(0, sec.size() + 1, sec + ".") == 0 && node.source().begin.line == 0) return shown;
    return location(node);
  }

  // Where "section.key" came from; falls back to its section, then to the file.
  std::string where(const std::string& section, const std::string& key = "") const {
    if (auto it = override_text_.find(section + "." + key); it != override_text_.end()) return it->second;
    if (const auto* sec = root_.get_as<toml::table>(section)) {
      if (const auto* n = key.empty() ? nullptr : sec->get(key)) return location(*n);
      if (sec->source().begin.line > 0) return location(*sec);
    }
    return source_;
  }

  void parse_text(const std::string& text) {
    try {
      root_ = toml::parse(text, source_);
    } catch (const toml::parse_error& e) {
      const auto& b = e.source().begin;
      throw Error(fmt::format("{}:{}:{}: TOML syntax error: {}", source_, b.line, b.column, e.description()));
    }
  }

  void apply_override(const std::string& arg) {
    const std::string shown = "--set " + arg;
    const auto eq = arg.find('=');
    const auto dot = arg.find('.');
    if (eq == std::string::npos || dot == std::string::npos || dot > eq)
      throw Error(fmt::format("{}: expected section.key=value (for example --set mesh.tp=2)", shown));
    const std::string section = arg.substr(0, dot), key = arg.substr(dot + 1, eq - dot - 1);
    const std::string value = arg.substr(eq + 1);
    // The value is read as a TOML value; a bare word that is not one (1f1b, /tmp/m.jsonl) is a string.
    toml::table parsed;
    try {
      parsed = toml::parse("v = " + value);
    } catch (const toml::parse_error&) {
      parsed.insert_or_assign("v", value);
    }
    auto* sec = root_.get_as<toml::table>(section);
    if (!sec) {
      if (root_.contains(section))
        throw Error(fmt::format("{}: '{}' is not a section in {}", shown, section, source_));
      root_.insert_or_assign(section, toml::table{});
      sec = root_.get_as<toml::table>(section);
    }
    sec->insert_or_assign(key, *parsed.get("v"));
    override_text_[section + "." + key] = shown;
  }

  void check_structure() const {
    const auto& known = deck::sections();
    for (const auto& [name, node] : root_) {
      const std::string sec(name.str());
      if (!node.is_table()) {
        // A key written before any section header: say which section it may belong to.
        std::string hint;
        for (const auto& k : deck::schema())
          if (k.key == sec) hint = fmt::format("; did you mean [{}] {}?", k.section, k.key);
        throw Error(fmt::format("{}: '{}' must be inside a section{} (sections: {})", key_location(name, node), sec,
                                hint, fmt::join(known, ", ")));
      }
      if (std::find(known.begin(), known.end(), sec) == known.end()) {
        throw Error(fmt::format("{}: unknown section [{}]{} (sections: {})", section_location(sec, node), sec,
                                suggestion(sec, known, "[", "]"), fmt::join(known, ", ")));
      }
      std::vector<std::string> keys;
      for (const auto& k : deck::schema())
        if (k.section == sec) keys.push_back(k.key);
      for (const auto& [kname, knode] : *node.as_table()) {
        const std::string key(kname.str());
        if (std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
        const std::string at = override_text_.count(sec + "." + key) ? where(sec, key) : key_location(kname, knode);
        const std::string meant = deck::suggest_key(sec, key);
        throw Error(fmt::format("{}: unknown key '{}' in [{}]{} (keys of [{}]: {})", at, key, sec,
                                meant.empty() ? "" : "; did you mean " + meant + "?", sec, fmt::join(keys, ", ")));
      }
    }
  }

  void apply_values(Config& cfg) const {
    for (const KeySpec& k : deck::schema()) {
      const auto* sec = root_.get_as<toml::table>(k.section);
      const toml::node* n = sec ? sec->get(k.key) : nullptr;
      if (!n) continue;
      if (auto err = k.apply(*n, cfg)) {
        throw Error(fmt::format("{}: [{}] {} = {}: {}; allowed: {}", where(k.section, k.key), k.section, k.key,
                                value_text(*n), err->problem, k.allowed));
      }
    }
  }

  bool given(const std::string& section, const std::string& key) const {
    const auto* sec = root_.get_as<toml::table>(section);
    return sec && sec->contains(key);
  }

  // model.architecture's components, for the keys the deck leaves out.
  void resolve_architecture(ModelConfig& m) const {
    const bool llama = m.architecture == Architecture::Llama;
    if (!given("model", "norm")) m.norm = llama ? Norm::RmsNorm : Norm::LayerNorm;
    if (!given("model", "positions")) m.positions = llama ? Positions::Rope : Positions::Learned;
    if (!given("model", "mlp")) m.mlp = llama ? Mlp::SwiGlu : Mlp::Gelu;
    if (!given("model", "bias")) m.bias = !llama;
    if (!given("model", "tie_embeddings")) m.tie_embeddings = !llama;
    if (!given("model", "kv_heads")) m.kv_heads = m.heads;
    if (!given("model", "ffn_hidden")) m.ffn_hidden = m.mlp == Mlp::SwiGlu ? llama_ffn_hidden(m.hidden) : 4 * m.hidden;
  }

  void resolve_derived(Config& cfg) const {
    resolve_architecture(cfg.model);
    if (!given("runtime", "comm")) cfg.runtime.comm = cfg.runtime.backend == Backend::Cuda ? Comm::Nccl : Comm::Mpi;
    if (!given("data", "tokenizer")) cfg.data.tokenizer = default_tokenizer(cfg.data.format, cfg.model.vocab_size);
  }

  // Input files named in the deck file are relative to the deck's directory; paths given with --set
  // are relative to the working directory, like any command-line path.
  void resolve_relative_paths(Config& cfg) const {
    namespace fs = std::filesystem;
    if (source_.empty() || source_[0] == '<') return;
    const fs::path dir = fs::path(source_).parent_path();
    auto fix = [&](const char* section, const char* key, std::string& value) {
      if (value.empty() || fs::path(value).is_absolute() || override_text_.count(std::string(section) + "." + key))
        return;
      value = (dir / value).lexically_normal().string();
    };
    fix("data", "path", cfg.data.path);
    fix("data", "val_path", cfg.data.val_path);
    fix("model", "init_from", cfg.model.init_from);
  }

  [[noreturn]] void rule_error(const std::string& section, const std::string& key, const std::string& message) const {
    throw Error(fmt::format("{}: {}", where(section, key), message));
  }

  // Where a key's value was set: the --set argument, the deck's file:line:column; "" for a default.
  std::string set_at(const std::string& section, const std::string& key) const {
    if (auto it = override_text_.find(section + "." + key); it != override_text_.end()) return it->second;
    const auto* sec = root_.get_as<toml::table>(section);
    const toml::node* n = sec ? sec->get(key) : nullptr;
    return n ? location(*n) : "";
  }

  // tp*pp*dp against the ranks launched, blaming where each factor was set (a --set first: the value
  // most likely meant for another launch).
  [[noreturn]] void world_size_error(const MeshConfig& mesh) const {
    std::string blamed, origins;
    for (const auto& [key, value] : {std::pair{"tp", mesh.tp}, std::pair{"pp", mesh.pp}, std::pair{"dp", mesh.dp}}) {
      const std::string at = set_at("mesh", key);
      origins += fmt::format("{}{} = {} {}", origins.empty() ? "" : ", ", key, value,
                             at.empty() ? "by default" : (at.rfind("--set", 0) == 0 ? "from " : "at ") + at);
      if (!at.empty() && (blamed.empty() || (at.rfind("--set", 0) == 0 && blamed.rfind("--set", 0) != 0))) blamed = at;
    }
    throw Error(fmt::format("{}: [mesh] tp*pp*dp = {}*{}*{} = {} but the job has {} ranks ({}); launch {} rank(s) or "
                            "change the mesh",
                            blamed.empty() ? source_ : blamed, mesh.tp, mesh.pp, mesh.dp, mesh.world_size(),
                            options_.world_size, origins, mesh.world_size()));
  }

  // mesh.dp = "auto" (0 until here): the world size over tp*pp.
  void resolve_auto_dp(MeshConfig& mesh) const {
    if (mesh.dp != 0) return;
    const int tp_pp = mesh.tp * mesh.pp;
    if (options_.world_size <= 0)
      rule_error("mesh", "dp",
                 "[mesh] dp = \"auto\" needs the number of ranks: run under mpiexec/srun, or `trident check --ranks N`");
    if (options_.world_size % tp_pp != 0)
      rule_error("mesh", "dp",
                 fmt::format("[mesh] dp = \"auto\": the job's {} ranks are not a multiple of tp*pp = {}*{} = {}",
                             options_.world_size, mesh.tp, mesh.pp, tp_pp));
    mesh.dp = options_.world_size / tp_pp;
  }

  void check_rules(Config& cfg) const {
    resolve_auto_dp(cfg.mesh);
    const auto& m = cfg.model;
    const auto& mesh = cfg.mesh;
    const auto& t = cfg.train;
    if (m.hidden % m.heads != 0)
      rule_error("model", "heads", fmt::format("[model] hidden = {} is not divisible by heads = {}", m.hidden, m.heads));
    if (m.heads % mesh.tp != 0)
      rule_error("mesh", "tp", fmt::format("[model] heads = {} is not divisible by [mesh] tp = {}", m.heads, mesh.tp));
    check_architecture_rules(cfg);
    if (m.ffn_hidden % mesh.tp != 0)
      rule_error("mesh", "tp",
                 fmt::format("[model] ffn_hidden = {} is not divisible by [mesh] tp = {}", m.ffn_hidden, mesh.tp));
    if (options_.world_size > 0 && mesh.world_size() != options_.world_size) world_size_error(mesh);
    if (t.global_batch % (t.micro_batch * mesh.dp) != 0)
      rule_error("train", "global_batch",
                 fmt::format("[train] global_batch = {} is not divisible by micro_batch*dp = {}*{} = {}",
                             t.global_batch, t.micro_batch, mesh.dp, t.micro_batch * mesh.dp));
    if (t.min_lr > t.lr)
      rule_error("train", "min_lr", fmt::format("[train] min_lr = {} is larger than lr = {}", t.min_lr, t.lr));
    check_pipeline_rules(cfg);
    if (t.sample_every > 0 && mesh.pp > 1)
      rule_error("train", "sample_every",
                 fmt::format("[train] sample_every needs [mesh] pp = 1 (a sample runs the whole model on each TP "
                             "group), not {}; sample a checkpoint with `trident generate` instead",
                             mesh.pp));
    if (t.sample_every > 0 && t.sample_tokens >= m.seq_len)
      rule_error("train", "sample_tokens",
                 fmt::format("[train] sample_tokens = {} leaves no position for the prompt: at most [model] seq_len - 1 "
                             "= {}",
                             t.sample_tokens, m.seq_len - 1));
    if (mesh.sequence_parallel && m.seq_len % mesh.tp != 0)
      rule_error("mesh", "sequence_parallel",
                 fmt::format("[mesh] sequence_parallel needs [model] seq_len = {} divisible by tp = {}", m.seq_len,
                             mesh.tp));
    if (t.precision == Precision::BF16 && t.matmul_precision == MatmulPrecision::TF32)
      rule_error("train", "matmul_precision",
                 "[train] matmul_precision = \"tf32\" contradicts [train] precision = \"bf16\", whose GEMMs take bf16 "
                 "operands; leave matmul_precision out");
    if (cfg.runtime.comm == Comm::Nccl && cfg.runtime.backend == Backend::Cpu)
      rule_error("runtime", "comm",
                 "[runtime] comm = \"nccl\" needs [runtime] backend = \"cuda\"; the cpu backend communicates over MPI");
    if (cfg.data.format == DataFormat::Text && m.vocab_size < 256)
      rule_error("model", "vocab_size",
                 fmt::format("[data] format = \"text\" uses byte tokens, so [model] vocab_size = {} must be >= 256",
                             m.vocab_size));
    if (cfg.data.format == DataFormat::Text && cfg.data.tokenizer != Tokenizer::Bytes)
      rule_error("data", "tokenizer",
                 fmt::format("[data] format = \"text\" reads bytes as token ids, so [data] tokenizer must be \"bytes\", "
                             "not \"{}\" (`trident data prepare` makes GPT-2 tokens from text)",
                             to_string(cfg.data.tokenizer)));
    if (cfg.data.format == DataFormat::Text && m.vocab_size > 256)
      cfg.warnings.push_back(fmt::format(
          "{}: [data] format = \"text\" trains on bytes: token ids 0-255 use only 256 of the {} ids of [model] "
          "vocab_size ({}); for GPT-2 tokens run `trident data prepare TEXT -o PREFIX` and train on its shards "
          "with [data] format = \"llmc\"",
          where("data", "format"), m.vocab_size,
          given("model", "vocab_size") ? where("model", "vocab_size") : std::string("its default")));
    if (cfg.data.tokenizer == Tokenizer::Gpt2 && m.vocab_size < kGpt2VocabSize)
      rule_error("data", "tokenizer",
                 fmt::format("[data] tokenizer = \"gpt2\" makes ids up to {}, so [model] vocab_size = {} must be >= {}",
                             kGpt2VocabSize - 1, m.vocab_size, kGpt2VocabSize));
    if (cfg.data.val_every > 0 && cfg.data.val_path.empty())
      rule_error("data", "val_every",
                 fmt::format("[data] val_every = {} needs [data] val_path (the validation data)", cfg.data.val_every));
    check_model_size(cfg);
    if ((cfg.checkpoint.every_steps > 0 || cfg.checkpoint.every_minutes > 0) && cfg.checkpoint.dir.empty())
      rule_error("checkpoint", "every_steps", "[checkpoint] every_steps/every_minutes need [checkpoint] dir");
    if (cfg.checkpoint.resume == "required" && cfg.checkpoint.dir.empty())
      rule_error("checkpoint", "resume", "[checkpoint] resume = \"required\" needs [checkpoint] dir");
    // ZeRO-3 gathers each layer inside a chunk's forward and backward; with pipeline stages the
    // schedule interleaves chunks and micro-batches, which the gather order does not follow yet.
    if (mesh.zero == 3 && mesh.pp > 1)
      rule_error("mesh", "zero",
                 fmt::format("[mesh] zero = 3 is supported with pp = 1 only (tp and dp any), but [mesh] pp = {}; use "
                             "zero <= 2 with pipeline parallelism",
                             mesh.pp));
    if (mesh.zero > 0 && mesh.dp == 1)
      cfg.warnings.push_back(fmt::format("{}: [mesh] zero = {} has no effect with dp = 1", where("mesh", "zero"), mesh.zero));
  }

  void check_architecture_rules(const Config& cfg) const {
    const auto& m = cfg.model;
    const int tp = cfg.mesh.tp;
    if (m.heads % m.kv_heads != 0)
      rule_error("model", "kv_heads",
                 fmt::format("[model] kv_heads = {} does not divide heads = {} (each key/value head serves a group of "
                             "query heads)",
                             m.kv_heads, m.heads));
    if (m.kv_heads % tp != 0 && tp % m.kv_heads != 0)
      rule_error("model", "kv_heads",
                 fmt::format("[model] kv_heads = {} and [mesh] tp = {}: one must divide the other (the key/value heads "
                             "are split over the TP ranks, or each is replicated on tp/kv_heads of them)",
                             m.kv_heads, tp));
    if (m.positions == Positions::Rope && m.head_dim() % 2 != 0)
      rule_error("model", "positions",
                 fmt::format("[model] positions = \"rope\" rotates pairs of a head's dimensions: the head size "
                             "hidden/heads = {} must be even",
                             m.head_dim()));
    if (m.norm == Norm::LayerNorm && !m.bias)
      rule_error("model", "bias",
                 "[model] bias = false with norm = \"layernorm\": a LayerNorm without its bias is not supported; use "
                 "norm = \"rmsnorm\" or bias = true");
    if (m.architecture != Architecture::Gpt2) return;
    // GPT-2's tensors (a fused c_attn, LayerNorm biases, wpe) have no place for other components.
    const auto refuse = [&](const char* key, const std::string& value) {
      rule_error("model", key,
                 fmt::format("[model] {} = {} needs [model] architecture = \"llama\" (GPT-2's Hugging Face tensors, "
                             "of [model] architecture = \"gpt2\", hold GPT-2's components only)",
                             key, value));
    };
    if (m.norm != Norm::LayerNorm) refuse("norm", fmt::format("\"{}\"", to_string(m.norm)));
    if (m.positions != Positions::Learned) refuse("positions", fmt::format("\"{}\"", to_string(m.positions)));
    if (m.mlp != Mlp::Gelu) refuse("mlp", fmt::format("\"{}\"", to_string(m.mlp)));
    if (!m.bias) refuse("bias", "false");
    if (m.kv_heads != m.heads) refuse("kv_heads", std::to_string(m.kv_heads));
  }

  // Sizes beyond kMaxModelElements would overflow the 64-bit byte counts of the model and the planner.
  void check_model_size(const Config& cfg) const {
    const auto params = checked_parameter_count(cfg.model);
    if (!params || *params > kMaxModelElements)
      rule_error("model", "hidden",
                 fmt::format("[model] the model has {} parameters; at most {} are supported",
                             params ? fmt::format("{}", *params) : std::string("more than 2^63"),
                             kMaxModelElements));
    const auto& m = cfg.model;
    const long double activation = (long double)(cfg.train.micro_batch) * m.seq_len *
                                   std::max({3 * m.hidden, 2 * m.ffn_hidden, m.vocab_size + m.vocab_pad_to});
    if (activation > (long double)kMaxModelElements)
      rule_error("train", "micro_batch",
                 fmt::format("[train] micro_batch * [model] seq_len * the widest layer = {} * {} * {} elements in "
                             "one activation; at most {} are supported",
                             cfg.train.micro_batch, m.seq_len,
                             std::max({3 * m.hidden, 2 * m.ffn_hidden, m.vocab_size + m.vocab_pad_to}), kMaxModelElements));
  }

  void check_pipeline_rules(Config& cfg) const {
    const auto& mesh = cfg.mesh;
    const int64_t chunks = int64_t(mesh.pp) * mesh.virtual_stages;
    const int64_t m = cfg.micro_batches_per_step();
    if (mesh.virtual_stages > 1 && mesh.schedule != Schedule::Interleaved)
      rule_error("mesh", "virtual_stages",
                 fmt::format("[mesh] virtual_stages = {} needs schedule = \"interleaved\"", mesh.virtual_stages));
    if (mesh.schedule == Schedule::Interleaved) {
      if (mesh.virtual_stages < 2)
        rule_error("mesh", "schedule", "[mesh] schedule = \"interleaved\" needs virtual_stages >= 2");
      if (mesh.pp < 2) rule_error("mesh", "schedule", "[mesh] schedule = \"interleaved\" needs pp >= 2");
      if (m % mesh.pp != 0)
        rule_error("mesh", "schedule",
                   fmt::format("[mesh] schedule = \"interleaved\" needs micro-batches per step ({} = global_batch / "
                               "(micro_batch*dp)) to be a multiple of pp = {}",
                               m, mesh.pp));
    }
    if (mesh.layers_per_stage.empty()) {
      if (cfg.model.layers < chunks)
        rule_error("mesh", "pp",
                   fmt::format("[model] layers = {} cannot fill pp*virtual_stages = {} pipeline chunks "
                               "(a stage with no layers)",
                               cfg.model.layers, chunks));
    } else {
      const auto& lps = mesh.layers_per_stage;
      const int64_t sum = std::accumulate(lps.begin(), lps.end(), int64_t(0));
      if (int64_t(lps.size()) != chunks || sum != cfg.model.layers)
        rule_error("mesh", "layers_per_stage",
                   fmt::format("[mesh] layers_per_stage has {} entries summing to {}; needs pp*virtual_stages = {} "
                               "entries summing to [model] layers = {}",
                               lps.size(), sum, chunks, cfg.model.layers));
    }
    if (mesh.schedule == Schedule::OneFOneB && mesh.pp > 1 && m < mesh.pp)
      cfg.warnings.push_back(fmt::format("{}: 1f1b with {} micro-batch(es) per step and pp = {}: fewer micro-batches "
                                         "than stages leaves most of the pipeline idle",
                                         where("mesh", "schedule"), m, mesh.pp));
  }

  static std::string resolved_toml(const Config& cfg) {
    std::ostringstream os;
    for (const auto& s : deck::sections()) {
      os << "[" << s << "]\n";
      for (const KeySpec& k : deck::schema())
        if (k.section == s) os << k.key << " = " << k.emit(cfg) << "\n";
      os << "\n";
    }
    return os.str();
  }
};

// Decks are a few KiB; anything near this is not one (and /dev/zero would otherwise be read forever).
constexpr std::uintmax_t kMaxDeckBytes = 4 << 20;

// Only a regular file is read: a FIFO or a device would block or never end.
std::string read_deck_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st))
    throw Error(fmt::format("{}: cannot read the deck file ({})", path,
                            ec ? ec.message() : std::string("No such file or directory")));
  if (fs::is_directory(st)) throw Error(fmt::format("{}: is a directory, not a deck file", path));
  if (!fs::is_regular_file(st))
    throw Error(fmt::format("{}: is not a regular file (a FIFO, socket or device); a deck must be a TOML file", path));
  const std::uintmax_t size = fs::file_size(path, ec);
  if (!ec && size > kMaxDeckBytes)
    throw Error(fmt::format("{}: {} bytes is too large for a deck (at most {} bytes)", path, size, kMaxDeckBytes));
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(fmt::format("{}: cannot open the deck file ({})", path, std::strerror(errno)));
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

}  // namespace

Config load_deck(const std::string& path, const std::vector<std::string>& overrides, const DeckOptions& options) {
  return parse_deck(read_deck_file(path), path, overrides, options);
}

Config parse_deck(const std::string& text, const std::string& source_name, const std::vector<std::string>& overrides,
                  const DeckOptions& options) {
  return DeckReader(source_name, options).read(text, overrides);
}

std::string deck_reference_markdown() {
  std::ostringstream os;
  os << "# Input deck reference\n\n"
     << "Generated by `trident deck-reference` from the schema in src/deck/schema.cpp (a test checks that this\n"
     << "file is current). Every key is optional; unknown sections and keys are errors. Override any key on the\n"
     << "command line with `--set section.key=value` (the value is read as TOML; a bare word that is not a TOML\n"
     << "value is a string). Relative input paths in a deck (data.path, data.val_path, model.init_from) are\n"
     << "relative to the deck's directory; output paths and paths given with --set to the working directory.\n\n"
     << "Rules between keys: tp*pp*dp equals the number of MPI ranks (train, topology); hidden divisible by heads;\n"
     << "heads and ffn_hidden divisible by tp; global_batch divisible by micro_batch*dp; the pipeline needs at\n"
     << "least one layer per chunk (pp*virtual_stages chunks); interleaved needs virtual_stages >= 2 and\n"
     << "micro-batches per step a multiple of pp; sequence_parallel needs seq_len divisible by tp; bf16 needs\n"
     << "the cuda backend; checkpoint intervals and resume = \"required\" need checkpoint.dir; val_every needs\n"
     << "val_path; at most 2^47 parameters, and at most 2^47 elements in one activation (micro_batch * seq_len\n"
     << "* the widest layer).\n"
     << "Float keys with an open bound (beta1, beta2 < 1; eps > 0, ...) are also checked after rounding to fp32.\n";
  for (const auto& s : deck::sections()) {
    os << "\n## [" << s << "]\n\n| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n";
    for (const auto& k : deck::schema()) {
      if (k.section != s) continue;
      os << fmt::format("| `{}` | {} | `{}` | {} | {} |\n", k.key, k.type, k.default_text, k.allowed, k.doc);
    }
  }
  return os.str();
}

#define TRIDENT_ENUM_NAME(E, ...)                              \
  const char* to_string(E v) {                                 \
    const char* names[] = {__VA_ARGS__};                       \
    return names[static_cast<int>(v)];                         \
  }
TRIDENT_ENUM_NAME(Schedule, "gpipe", "1f1b", "interleaved")
TRIDENT_ENUM_NAME(LrSchedule, "constant", "cosine", "linear")
TRIDENT_ENUM_NAME(Recompute, "none", "full", "selective")
TRIDENT_ENUM_NAME(Precision, "fp32", "bf16")
TRIDENT_ENUM_NAME(MatmulPrecision, "fp32", "tf32", "bf16")
TRIDENT_ENUM_NAME(DataFormat, "text", "llmc", "megatron")
TRIDENT_ENUM_NAME(Tokenizer, "gpt2", "bytes", "none")
TRIDENT_ENUM_NAME(DataOrder, "sequential", "shuffle")
TRIDENT_ENUM_NAME(Backend, "cpu", "cuda")
TRIDENT_ENUM_NAME(MpiWait, "block", "poll")
TRIDENT_ENUM_NAME(Comm, "mpi", "nccl")
TRIDENT_ENUM_NAME(OnSignal, "checkpoint-exit", "checkpoint-continue")
TRIDENT_ENUM_NAME(Architecture, "gpt2", "llama")
TRIDENT_ENUM_NAME(Norm, "layernorm", "rmsnorm")
TRIDENT_ENUM_NAME(Positions, "learned", "rope")
TRIDENT_ENUM_NAME(Mlp, "gelu", "swiglu")
#undef TRIDENT_ENUM_NAME

}  // namespace trident
