// The input deck: defaults and ranges of every key, the exact error text (with file:line:column) of bad
// decks, cross-key rules, --set overrides, relative paths, the resolved-TOML round trip, the example
// decks in input/, input/README.md against `trident deck-reference`, and the command line.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/test_support.hpp"
#include "core/error.hpp"
#include "core/config.hpp"
#include "deck/deck.hpp"
#include "deck/key_suggestions.hpp"
#include "deck/schema.hpp"
#include "trident_version.hpp"

namespace trident {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kSourceDir = TRIDENT_SOURCE_DIR;

// The error message of parsing `text` as "deck.toml", or "<no error>".
std::string deck_error(const std::string& text, const std::vector<std::string>& overrides = {}, int world = 0) {
  try {
    parse_deck(text, "deck.toml", overrides, DeckOptions{world});
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

Config parse(const std::string& text, const std::vector<std::string>& overrides = {}, int world = 0) {
  return parse_deck(text, "deck.toml", overrides, DeckOptions{world});
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

// ---------------------------------------------------------------------------------------------------
// Bad decks: each with its exact message.

struct BadDeck {
  std::string name;
  std::string text;
  std::vector<std::string> overrides;
  int world;
  std::string error;
};

const std::string kModelKeys =
    "vocab_size, seq_len, layers, hidden, heads, kv_heads, ffn_hidden, architecture, norm, norm_eps, positions, "
    "rope_theta, mlp, bias, tie_embeddings, init_std, seed, init_from, vocab_pad_to";
const std::string kMeshKeys =
    "tp, pp, dp, order, schedule, virtual_stages, sequence_parallel, zero, strict_placement, layers_per_stage, "
    "bucket_mb, overlap_grad_reduce, grad_reduce_dtype";
const std::string kTrainKeys =
    "steps, micro_batch, global_batch, lr, min_lr, warmup_steps, lr_schedule, weight_decay, beta1, beta2, eps, "
    "grad_clip, recompute, precision, matmul_precision, bf16_parameters, logits_chunk_mib, sample_every, "
    "sample_tokens, sample_prompt";
const std::string kSections = "model, mesh, train, data, checkpoint, runtime";
const std::string kLpsAllowed = "an array of pp*virtual_stages integers in [1, 2147483647] that sum to model.layers";
const std::string kScheduleAllowed = "one of \"gpipe\", \"1f1b\", \"interleaved\"";

std::vector<BadDeck> bad_decks() {
  return {
      // --- TOML syntax ---
      {"SyntaxMissingValue", "[mesh]\ntp =\n", {}, 0,
       "deck.toml:2:5: TOML syntax error: Error while parsing key-value pair: expected value, saw '\\n'"},
      {"SyntaxUnterminatedString", "[data]\npath = \"abc\n", {}, 0,
       "deck.toml:2:12: TOML syntax error: Error while parsing string: unescaped control characters other than TAB "
       "(U+0009) are explicitly prohibited"},
      {"SyntaxUnclosedHeader", "[mesh\ntp = 2\n", {}, 0,
       "deck.toml:1:6: TOML syntax error: Error while parsing table header: expected ']', saw '\\n'"},
      {"SyntaxDuplicateKey", "[mesh]\ntp = 2\ntp = 4\n", {}, 0,
       "deck.toml:3:6: TOML syntax error: Error while parsing key-value pair: cannot redefine existing integer 'tp'"},
      {"SyntaxDuplicateSection", "[mesh]\ntp = 2\n[mesh]\npp = 2\n", {}, 0,
       "deck.toml:3:1: TOML syntax error: Error while parsing table header: cannot redefine existing table 'mesh'"},
      {"SyntaxBareWordInFile", "[train]\nprecision = bf16\n", {}, 0,
       "deck.toml:2:13: TOML syntax error: Error while parsing value: could not determine value type"},
      // --- wrong types, one per kind ---
      {"IntegerGivenString", "[mesh]\ntp = \"2\"\n", {}, 0,
       "deck.toml:2:6: [mesh] tp = '2': wrong type (string); allowed: an integer in [1, 65536]"},
      {"IntegerGivenFloat", "[model]\nlayers = 12.0\n", {}, 0,
       "deck.toml:2:10: [model] layers = 12.0: wrong type (float); allowed: an integer in [1, 2147483647]"},
      {"IntegerGivenArray", "[mesh]\ndp = [2]\n", {}, 0,
       "deck.toml:2:6: [mesh] dp = [ 2 ]: wrong type (array); allowed: \"auto\" or an integer in [1, 1048576]"},
      {"IntegerGivenTable", "[mesh]\ntp = { x = 1 }\n", {}, 0,
       "deck.toml:2:6: [mesh] tp = { x = 1 }: wrong type (table); allowed: an integer in [1, 65536]"},
      {"IntegerGivenDate", "[train]\nsteps = 2024-01-01\n", {}, 0,
       "deck.toml:2:9: [train] steps = 2024-01-01: wrong type (date/time); allowed: an integer in [0, 1099511627776]"},
      {"FloatGivenString", "[train]\nlr = \"3e-4\"\n", {}, 0,
       "deck.toml:2:6: [train] lr = '3e-4': wrong type (string); allowed: a number >= 0"},
      {"FloatGivenBoolean", "[train]\ngrad_clip = true\n", {}, 0,
       "deck.toml:2:13: [train] grad_clip = true: wrong type (boolean); allowed: a number >= 0"},
      {"BooleanGivenInteger", "[model]\ntie_embeddings = 1\n", {}, 0,
       "deck.toml:2:18: [model] tie_embeddings = 1: wrong type (integer); allowed: true or false"},
      {"BooleanGivenString", "[mesh]\nsequence_parallel = \"true\"\n", {}, 0,
       "deck.toml:2:21: [mesh] sequence_parallel = 'true': wrong type (string); allowed: true or false"},
      {"StringGivenInteger", "[data]\npath = 42\n", {}, 0,
       "deck.toml:2:8: [data] path = 42: wrong type (integer); allowed: a file path (or glob for llmc)"},
      {"EnumGivenInteger", "[mesh]\nschedule = 1\n", {}, 0,
       "deck.toml:2:12: [mesh] schedule = 1: wrong type (integer); allowed: " + kScheduleAllowed},
      {"EnumNotAllowed", "[mesh]\nschedule = \"1F1B\"\n", {}, 0,
       "deck.toml:2:12: [mesh] schedule = '1F1B': not an allowed value; allowed: " + kScheduleAllowed},
      {"EnumPrecisionFp16", "[train]\nprecision = \"fp16\"\n", {}, 0,
       "deck.toml:2:13: [train] precision = 'fp16': not an allowed value; allowed: one of \"fp32\", \"bf16\""},
      {"ArrayGivenInteger", "[mesh]\nlayers_per_stage = 6\n", {}, 0,
       "deck.toml:2:20: [mesh] layers_per_stage = 6: wrong type (integer); allowed: " + kLpsAllowed},
      {"ArrayElementFloat", "[mesh]\npp = 2\nlayers_per_stage = [6, 6.0]\n", {}, 0,
       "deck.toml:3:20: [mesh] layers_per_stage = [ 6, 6.0 ]: every element must be an integer; allowed: " +
           kLpsAllowed},
      {"ArrayZeroEntry", "[mesh]\npp = 2\nlayers_per_stage = [12, 0]\n", {}, 0,
       "deck.toml:3:20: [mesh] layers_per_stage = [ 12, 0 ]: a stage with no layers; allowed: " + kLpsAllowed},
      {"OrderNotPermutation", "[mesh]\norder = \"tp-tp-pp\"\n", {}, 0,
       "deck.toml:2:9: [mesh] order = 'tp-tp-pp': not a permutation of tp, dp, pp; allowed: a permutation of tp, "
       "dp, pp joined by '-', fastest-varying first"},
      // --- out of range ---
      {"TpZero", "[mesh]\ntp = 0\n", {}, 0,
       "deck.toml:2:6: [mesh] tp = 0: out of range; allowed: an integer in [1, 65536]"},
      {"ZeroStage4", "[mesh]\nzero = 4\n", {}, 0,
       "deck.toml:2:8: [mesh] zero = 4: out of range; allowed: an integer in [0, 3]"},
      {"NegativeLr", "[train]\nlr = -0.001\n", {}, 0,
       "deck.toml:2:6: [train] lr = -0.001: out of range; allowed: a number >= 0"},
      {"NanLr", "[train]\nlr = nan\n", {}, 0, "deck.toml:2:6: [train] lr = nan: out of range; allowed: a number >= 0"},
      {"Beta2One", "[train]\nbeta2 = 1.0\n", {}, 0,
       "deck.toml:2:9: [train] beta2 = 1.0: out of range; allowed: a number >= 0 and < 1"},
      {"InitStdZero", "[model]\ninit_std = 0.0\n", {}, 0,
       "deck.toml:2:12: [model] init_std = 0.0: out of range; allowed: a number > 0"},
      {"NegativeSteps", "[train]\nsteps = -1\n", {}, 0,
       "deck.toml:2:9: [train] steps = -1: out of range; allowed: an integer in [0, 1099511627776]"},
      // Above the 2^31-1 cap, which the allowed range states.
      {"VocabAboveInt32", "[model]\nvocab_size = 3000000000\n", {}, 0,
       "deck.toml:2:14: [model] vocab_size = 3000000000: out of range; allowed: an integer in [2, 2147483647]"},
      // --- unknown sections and keys ---
      {"UnknownKeyDidYouMean", "[model]\nlayres = 4\n", {}, 0,
       "deck.toml:2:1: unknown key 'layres' in [model]; did you mean 'layers'? (keys of [model]: " + kModelKeys +
           ")"},
      {"UnknownKeyCase", "[mesh]\nTP = 2\n", {}, 0,
       "deck.toml:2:1: unknown key 'TP' in [mesh]; did you mean 'tp'? (keys of [mesh]: " + kMeshKeys + ")"},
      {"UnknownKeyNoSuggestion", "[train]\nbatch_size_tokens = 4\n", {}, 0,
       "deck.toml:2:1: unknown key 'batch_size_tokens' in [train] (keys of [train]: " + kTrainKeys + ")"},
      // Other tools' names (nanoGPT, Megatron-LM, Hugging Face), prefixes and keys of another section.
      {"UnknownKeyOtherToolsName", "[train]\nlearning_rate = 0.1\n", {}, 0,
       "deck.toml:2:1: unknown key 'learning_rate' in [train]; did you mean 'lr'? (keys of [train]: " + kTrainKeys +
           ")"},
      {"UnknownKeyMegatronName", "[mesh]\ntensor_model_parallel_size = 2\n", {}, 0,
       "deck.toml:2:1: unknown key 'tensor_model_parallel_size' in [mesh]; did you mean 'tp'? (keys of [mesh]: " +
           kMeshKeys + ")"},
      {"UnknownKeyOtherToolsNameInAnotherSection", "[train]\nn_layer = 2\n", {}, 0,
       "deck.toml:2:1: unknown key 'n_layer' in [train]; did you mean [model] layers? (keys of [train]: " + kTrainKeys +
           ")"},
      {"UnknownKeyPrefix", "[train]\nwarmup = 10\n", {}, 0,
       "deck.toml:2:1: unknown key 'warmup' in [train]; did you mean 'warmup_steps'? (keys of [train]: " + kTrainKeys +
           ")"},
      {"KeyOfAnotherSection", "[train]\ntp = 2\n", {}, 0,
       "deck.toml:2:1: unknown key 'tp' in [train]; did you mean [mesh] tp? (keys of [train]: " + kTrainKeys + ")"},
      {"UnknownSectionDidYouMean", "[modle]\nlayers = 4\n", {}, 0,
       "deck.toml:1:1: unknown section [modle]; did you mean [model]? (sections: " + kSections + ")"},
      {"UnknownSectionNoSuggestion", "[optimizer]\nlr = 1.0\n", {}, 0,
       "deck.toml:1:1: unknown section [optimizer] (sections: " + kSections + ")"},
      {"KeyOutsideSections", "steps = 10\n", {}, 0,
       "deck.toml:1:1: 'steps' must be inside a section; did you mean [train] steps? (sections: " + kSections + ")"},
      {"SectionGivenAsValue", "model = 3\n", {}, 0, "deck.toml:1:1: 'model' must be inside a section (sections: " + kSections + ")"},
      // --- cross-key rules ---
      {"HiddenNotDivisibleByHeads", "[model]\nhidden = 100\nheads = 12\n", {}, 0,
       "deck.toml:3:9: [model] hidden = 100 is not divisible by heads = 12"},
      {"HeadsNotDivisibleByTp", "[mesh]\ntp = 5\n", {}, 0,
       "deck.toml:2:6: [model] heads = 12 is not divisible by [mesh] tp = 5"},
      {"FfnNotDivisibleByTp", "[model]\nffn_hidden = 3071\n[mesh]\ntp = 2\n", {}, 0,
       "deck.toml:4:6: [model] ffn_hidden = 3071 is not divisible by [mesh] tp = 2"},
      // The rank count blames where each factor was set: the deck's lines, a --set before them.
      {"WorldSizeMismatch", "[mesh]\ntp = 2\npp = 2\n", {}, 8,
       "deck.toml:2:6: [mesh] tp*pp*dp = 2*2*1 = 4 but the job has 8 ranks (tp = 2 at deck.toml:2:6, pp = 2 at "
       "deck.toml:3:6, dp = 1 by default); launch 4 rank(s) or change the mesh"},
      {"WorldSizeMismatchFromSet", "[mesh]\ntp = 2\n", {"mesh.dp=4"}, 4,
       "--set mesh.dp=4: [mesh] tp*pp*dp = 2*1*4 = 8 but the job has 4 ranks (tp = 2 at deck.toml:2:6, pp = 1 by "
       "default, dp = 4 from --set mesh.dp=4); launch 8 rank(s) or change the mesh"},
      {"WorldSizeMismatchNoMesh", "[model]\nlayers = 4\n", {}, 2,
       "deck.toml: [mesh] tp*pp*dp = 1*1*1 = 1 but the job has 2 ranks (tp = 1 by default, pp = 1 by default, dp = "
       "1 by default); launch 1 rank(s) or change the mesh"},
      {"GlobalBatchNotDivisible", "[train]\nmicro_batch = 4\nglobal_batch = 10\n", {}, 0,
       "deck.toml:3:16: [train] global_batch = 10 is not divisible by micro_batch*dp = 4*1 = 4"},
      {"GlobalBatchNotDivisibleByDp", "[mesh]\ndp = 3\n", {}, 0,
       "deck.toml: [train] global_batch = 8 is not divisible by micro_batch*dp = 1*3 = 3"},
      {"Zero3WithPipeline", "[mesh]\npp = 2\ndp = 2\nzero = 3\n", {}, 0,
       "deck.toml:4:8: [mesh] zero = 3 is supported with pp = 1 only (tp and dp any), but [mesh] pp = 2; use zero <= 2 "
       "with pipeline parallelism"},
      {"MinLrAboveLr", "[train]\nlr = 0.001\nmin_lr = 0.01\n", {}, 0,
       "deck.toml:3:10: [train] min_lr = 0.01 is larger than lr = 0.001"},
      {"VirtualStagesWithoutInterleaved", "[mesh]\npp = 2\nvirtual_stages = 2\n", {}, 0,
       "deck.toml:3:18: [mesh] virtual_stages = 2 needs schedule = \"interleaved\""},
      {"InterleavedOneVirtualStage", "[mesh]\npp = 2\nschedule = \"interleaved\"\n", {}, 0,
       "deck.toml:3:12: [mesh] schedule = \"interleaved\" needs virtual_stages >= 2"},
      {"InterleavedSingleStage", "[model]\nlayers = 4\n[mesh]\nschedule = \"interleaved\"\nvirtual_stages = 2\n", {}, 0,
       "deck.toml:4:12: [mesh] schedule = \"interleaved\" needs pp >= 2"},
      {"InterleavedMicroBatchesNotMultipleOfPp",
       "[mesh]\npp = 2\nschedule = \"interleaved\"\nvirtual_stages = 2\n[train]\nglobal_batch = 6\nmicro_batch = 2\n",
       {}, 0,
       "deck.toml:3:12: [mesh] schedule = \"interleaved\" needs micro-batches per step (3 = global_batch / "
       "(micro_batch*dp)) to be a multiple of pp = 2"},
      {"LayersFewerThanStages", "[model]\nlayers = 4\n[mesh]\npp = 8\n", {}, 0,
       "deck.toml:4:6: [model] layers = 4 cannot fill pp*virtual_stages = 8 pipeline chunks (a stage with no layers)"},
      {"LayersFewerThanChunks", "[model]\nlayers = 6\n[mesh]\npp = 2\nschedule = \"interleaved\"\nvirtual_stages = 4\n",
       {}, 0,
       "deck.toml:4:6: [model] layers = 6 cannot fill pp*virtual_stages = 8 pipeline chunks (a stage with no layers)"},
      {"LayersPerStageWrongLength", "[mesh]\npp = 2\nlayers_per_stage = [4, 4, 4]\n", {}, 0,
       "deck.toml:3:20: [mesh] layers_per_stage has 3 entries summing to 12; needs pp*virtual_stages = 2 entries "
       "summing to [model] layers = 12"},
      {"LayersPerStageWrongSum", "[mesh]\npp = 2\nlayers_per_stage = [6, 5]\n", {}, 0,
       "deck.toml:3:20: [mesh] layers_per_stage has 2 entries summing to 11; needs pp*virtual_stages = 2 entries "
       "summing to [model] layers = 12"},
      {"SequenceParallelSeqLen", "[model]\nseq_len = 1023\n[mesh]\ntp = 2\nsequence_parallel = true\n", {}, 0,
       "deck.toml:5:21: [mesh] sequence_parallel needs [model] seq_len = 1023 divisible by tp = 2"},
      {"Bf16WithTf32", "[train]\nprecision = \"bf16\"\nmatmul_precision = \"tf32\"\n", {}, 0,
       "deck.toml:3:20: [train] matmul_precision = \"tf32\" contradicts [train] precision = \"bf16\", whose GEMMs take "
       "bf16 operands; leave matmul_precision out"},
      {"SampleEveryWithPipeline", "[mesh]\npp = 2\n[train]\nsample_every = 10\n", {}, 0,
       "deck.toml:4:16: [train] sample_every needs [mesh] pp = 1 (a sample runs the whole model on each TP group), "
       "not 2; sample a checkpoint with `trident generate` instead"},
      {"SampleTokensFillTheContext", "[model]\nseq_len = 64\n[train]\nsample_every = 5\nsample_tokens = 64\n", {}, 0,
       "deck.toml:5:17: [train] sample_tokens = 64 leaves no position for the prompt: at most [model] seq_len - 1 = 63"},
      {"NcclOnCpu", "[runtime]\ncomm = \"nccl\"\n", {}, 0,
       "deck.toml:2:8: [runtime] comm = \"nccl\" needs [runtime] backend = \"cuda\"; the cpu backend communicates over "
       "MPI"},
      {"TextVocabTooSmall", "[model]\nvocab_size = 100\n", {}, 0,
       "deck.toml:2:14: [data] format = \"text\" uses byte tokens, so [model] vocab_size = 100 must be >= 256"},
      {"CheckpointEveryStepsWithoutDir", "[checkpoint]\nevery_steps = 100\n", {}, 0,
       "deck.toml:2:15: [checkpoint] every_steps/every_minutes need [checkpoint] dir"},
      {"CheckpointEveryMinutesWithoutDir", "[checkpoint]\nevery_minutes = 30.0\n", {}, 0,
       "deck.toml:1:1: [checkpoint] every_steps/every_minutes need [checkpoint] dir"},
      // --- --set overrides ---
      {"SetWithoutValue", "", {"mesh.tp"}, 0, "--set mesh.tp: expected section.key=value (for example --set mesh.tp=2)"},
      {"SetWithoutSection", "", {"tp=2"}, 0, "--set tp=2: expected section.key=value (for example --set mesh.tp=2)"},
      {"SetUnknownKey", "[mesh]\ntp = 2\n", {"mesh.tpp=2"}, 0,
       "--set mesh.tpp=2: unknown key 'tpp' in [mesh]; did you mean 'tp'? (keys of [mesh]: " + kMeshKeys + ")"},
      {"SetOutOfRange", "[mesh]\ntp = 2\n", {"mesh.tp=0"}, 0,
       "--set mesh.tp=0: [mesh] tp = 0: out of range; allowed: an integer in [1, 65536]"},
      {"SetBareWordNotAllowed", "", {"mesh.schedule=2f2b"}, 0,
       "--set mesh.schedule=2f2b: [mesh] schedule = '2f2b': not an allowed value; allowed: " + kScheduleAllowed},
      {"SetBareWordForInteger", "", {"train.steps=ten"}, 0,
       "--set train.steps=ten: [train] steps = 'ten': wrong type (string); allowed: an integer in [0, 1099511627776]"},
      {"SetBreaksCrossKeyRule", "", {"mesh.tp=5"}, 0,
       "--set mesh.tp=5: [model] heads = 12 is not divisible by [mesh] tp = 5"},
      {"SetIntoValueNotSection", "mesh = 1\n", {"mesh.tp=2"}, 0, "--set mesh.tp=2: 'mesh' is not a section in deck.toml"},
  };
}

void PrintTo(const BadDeck& c, std::ostream* os) { *os << c.name; }

class BadDeckTest : public ::testing::TestWithParam<BadDeck> {};

TEST_P(BadDeckTest, ExactMessage) {
  const BadDeck& c = GetParam();
  EXPECT_EQ(deck_error(c.text, c.overrides, c.world), c.error) << "deck:\n" << c.text;
}

INSTANTIATE_TEST_SUITE_P(Deck, BadDeckTest, ::testing::ValuesIn(bad_decks()),
                         [](const ::testing::TestParamInfo<BadDeck>& i) { return i.param.name; });

TEST(Deck, EnoughBadDecks) { EXPECT_GE(bad_decks().size(), 30u); }

// An unknown section that only a --set argument names must be blamed on that argument.
// Every other tool's name leads to a key that exists, and none shadows one of trident's own keys.
TEST(Deck, OtherToolsNamesLeadToExistingKeys) {
  for (const auto& [name, target] : deck::other_tools_key_names()) {
    const auto dot = target.find('.');
    ASSERT_NE(dot, std::string::npos) << name << " -> " << target;
    const auto& keys = deck::schema();
    EXPECT_TRUE(std::any_of(keys.begin(), keys.end(), [&](const deck::KeySpec& k) {
      return k.section == target.substr(0, dot) && k.key == target.substr(dot + 1);
    })) << name << " -> " << target << " names no key";
    EXPECT_FALSE(std::any_of(keys.begin(), keys.end(), [&](const deck::KeySpec& k) { return k.key == name; }))
        << name << " is a trident key itself";
  }
}

TEST(Deck, UnknownSectionViaSetNamesTheArgument) {
  EXPECT_EQ(deck_error("", {"modle.layers=2"}),
            "--set modle.layers=2: unknown section [modle]; did you mean [model]? (sections: " + kSections + ")");
}

// ---------------------------------------------------------------------------------------------------
// Defaults and ranges of every key.

struct KeyRow {
  std::string section, key;
  std::string type;          // as documented
  std::string default_doc;   // the documented default
  std::string default_toml;  // the default as a TOML value (what the resolved deck holds)
  std::string allowed;
  // Boundaries as TOML values: the extreme accepted value and the first rejected one beyond it
  // ("" where a bound does not exist or is not a number).
  std::string low_ok, low_bad, high_ok, high_bad;
  // --set overrides that keep the other rules satisfied at the tested values; an entry starting with '+'
  // applies to the high bound only.
  std::vector<std::string> context;
};

std::vector<std::string> context_for(const KeyRow& r, bool high) {
  std::vector<std::string> v;
  for (const auto& c : r.context) {
    if (c[0] != '+') v.push_back(c);
    else if (high) v.push_back(c.substr(1));
  }
  return v;
}

const std::string kBig = "2147483647", kBigBad = "2147483648";
const std::string k2p40 = "1099511627776", k2p40Bad = "1099511627777";

std::vector<KeyRow> key_rows() {
  return {
      {"model", "vocab_size", "integer", "50257", "50257", "an integer in [2, 2147483647]", "2", "1", kBig, kBigBad,
       {"data.format=llmc"}},
      {"model", "seq_len", "integer", "1024", "1024", "an integer in [1, 2147483647]", "1", "0", kBig, kBigBad, {}},
      // 2^31 layers pass the model-size rule (at most 2^47 parameters) only when each is tiny.
      {"model", "layers", "integer", "12", "12", "an integer in [1, 2147483647]", "1", "0", kBig, kBigBad,
       {"+model.hidden=1", "+model.heads=1"}},
      // A width (and so a head count) of 2^31 breaks the model-size rule whatever the other keys, so their
      // upper bounds are not checked here (tests/fault/deck_defects.cpp checks the rule).
      {"model", "hidden", "integer", "768", "768", "an integer in [1, 2147483647]", "1", "0", "", "", {"model.heads=1"}},
      {"model", "heads", "integer", "12", "12", "an integer in [1, 2147483647]", "1", "0", "", "", {}},
      // kv_heads must divide heads: its upper bound breaks that rule, so only the lower one is checked.
      {"model", "kv_heads", "integer", "heads", "12", "an integer in [1, 2147483647]", "1", "0", "", "",
       {"model.architecture=llama"}},
      {"model", "ffn_hidden", "integer", "4*hidden (gelu); 8*hidden/3 rounded up to a multiple of 256 (swiglu)", "3072",
       "an integer in [1, 2147483647]", "1", "0", kBig, kBigBad, {}},
      {"model", "architecture", "string", "\"gpt2\"", "\"gpt2\"", "one of \"gpt2\", \"llama\"", "", "", "", "", {}},
      {"model", "norm", "string", "by architecture: \"layernorm\" (gpt2), \"rmsnorm\" (llama)", "\"layernorm\"",
       "one of \"layernorm\", \"rmsnorm\"", "", "", "", "", {}},
      {"model", "norm_eps", "float", "1e-05", "1e-05", "a number > 0 and <= 1", "1e-45", "0.0", "1.0", "1.5", {}},
      {"model", "positions", "string", "by architecture: \"learned\" (gpt2), \"rope\" (llama)", "\"learned\"",
       "one of \"learned\", \"rope\"", "", "", "", "", {}},
      {"model", "rope_theta", "float", "10000", "10000.0", "a number >= 1", "1.0", "0.5", "1e300", "inf", {}},
      {"model", "mlp", "string", "by architecture: \"gelu\" (gpt2), \"swiglu\" (llama)", "\"gelu\"",
       "one of \"gelu\", \"swiglu\"", "", "", "", "", {}},
      {"model", "bias", "boolean", "true", "true", "true or false", "", "", "", "", {}},
      {"model", "tie_embeddings", "boolean", "true", "true", "true or false", "", "", "", "", {}},
      {"model", "init_std", "float", "0.02", "0.02", "a number > 0", "1e-45", "0.0", "1e300", "inf", {}},
      {"model", "seed", "integer", "1234", "1234", "an integer in [0, 2147483647]", "0", "-1", kBig, kBigBad, {}},
      {"model", "init_from", "string", "\"\"", "\"\"", "empty, or the path of a safetensors file, an index json or a model directory", "", "", "", "", {}},
      {"model", "vocab_pad_to", "integer", "128", "128", "an integer in [1, 1048576]", "1", "0", "1048576", "1048577", {}},
      {"mesh", "tp", "integer", "1", "1", "an integer in [1, 65536]", "1", "0", "65536", "65537",
       {"model.heads=65536", "model.hidden=65536"}},
      {"mesh", "pp", "integer", "1", "1", "an integer in [1, 65536]", "1", "0", "65536", "65537",
       {"model.layers=65536"}},
      {"mesh", "dp", "integer", "1", "1", "\"auto\" or an integer in [1, 1048576]", "1", "0", "1048576", "1048577",
       {"train.global_batch=1048576"}},
      {"mesh", "order", "string", "\"tp-dp-pp\"", "\"tp-dp-pp\"",
       "a permutation of tp, dp, pp joined by '-', fastest-varying first", "", "", "", "", {}},
      {"mesh", "schedule", "string", "\"1f1b\"", "\"1f1b\"", kScheduleAllowed, "", "", "", "", {}},
      {"mesh", "virtual_stages", "integer", "1", "1", "an integer in [1, 1024]", "1", "0", "1024", "1025",
       {"+mesh.schedule=interleaved", "+mesh.pp=2", "+model.layers=2048"}},
      {"mesh", "sequence_parallel", "boolean", "false", "false", "true or false", "", "", "", "", {}},
      {"mesh", "zero", "integer", "0", "0", "an integer in [0, 3]", "0", "-1", "3", "4", {}},
      {"mesh", "strict_placement", "boolean", "false", "false", "true or false", "", "", "", "", {}},
      {"mesh", "layers_per_stage", "integer array", "[] (balanced)", "[]", kLpsAllowed, "", "", "", "", {}},
      {"mesh", "bucket_mb", "float", "25", "25.0", "a number > 0 and <= 65536", "1e-45", "0.0", "65536.0", "65536.5",
       {}},
      {"mesh", "overlap_grad_reduce", "boolean", "true", "true", "true or false", "", "", "", "", {}},
      {"mesh", "grad_reduce_dtype", "string", "\"fp32\"", "\"fp32\"", "one of \"fp32\", \"bf16\"", "", "", "", "", {}},
      {"train", "steps", "integer", "10", "10", "an integer in [0, 1099511627776]", "0", "-1", k2p40, k2p40Bad, {}},
      {"train", "micro_batch", "integer", "1", "1", "an integer in [1, 2147483647]", "1", "0", kBig, kBigBad,
       {"train.global_batch=" + kBig, "+model.seq_len=1", "+model.hidden=1", "+model.heads=1", "+data.format=llmc",
        "+model.vocab_size=2"}},
      {"train", "global_batch", "integer", "8", "8", "an integer in [1, 2147483647]", "1", "0", kBig, kBigBad, {}},
      {"train", "lr", "float", "0.0006", "0.0006", "a number >= 0", "0.0", "-0.5", "1e300", "inf", {}},
      {"train", "min_lr", "float", "0", "0.0", "a number >= 0", "0.0", "-0.5", "1e300", "inf", {"train.lr=1e300"}},
      {"train", "warmup_steps", "integer", "0", "0", "an integer in [0, 1099511627776]", "0", "-1", k2p40, k2p40Bad, {}},
      {"train", "lr_schedule", "string", "\"cosine\"", "\"cosine\"", "one of \"constant\", \"cosine\", \"linear\"", "",
       "", "", "", {}},
      {"train", "weight_decay", "float", "0.1", "0.1", "a number >= 0", "0.0", "-0.5", "1e300", "inf", {}},
      {"train", "beta1", "float", "0.9", "0.9", "a number >= 0 and < 1", "0.0", "-0.5", "0.999999",
       "1.0", {}},
      {"train", "beta2", "float", "0.95", "0.95", "a number >= 0 and < 1", "0.0", "-0.5", "0.999999",
       "1.0", {}},
      {"train", "eps", "float", "1e-08", "1e-08", "a number > 0 and <= 1", "1e-45", "0.0", "1.0", "1.5", {}},
      {"train", "grad_clip", "float", "1", "1.0", "a number >= 0", "0.0", "-0.5", "1e300", "inf", {}},
      {"train", "recompute", "string", "\"none\"", "\"none\"", "one of \"none\", \"full\", \"selective\"", "", "", "",
       "", {}},
      {"train", "precision", "string", "\"fp32\"", "\"fp32\"", "one of \"fp32\", \"bf16\"", "", "", "", "", {}},
      {"train", "matmul_precision", "string", "\"fp32\"", "\"fp32\"", "one of \"fp32\", \"tf32\", \"bf16\"", "", "", "",
       "", {}},
      {"train", "bf16_parameters", "boolean", "true", "true", "true or false", "", "", "", "", {}},
      {"train", "logits_chunk_mib", "float", "256", "256.0", "a number >= 0", "0.0", "-0.5", "1e300", "inf", {}},
      {"train", "sample_every", "integer", "0", "0", "an integer in [0, 1099511627776]", "0", "-1", k2p40, k2p40Bad, {}},
      {"train", "sample_tokens", "integer", "64", "64", "an integer in [1, 1048576]", "1", "0", "1048576", "1048577", {}},
      {"train", "sample_prompt", "string", "\"\"", "\"\"", "any text", "", "", "", "", {}},
      {"data", "format", "string", "\"text\"", "\"text\"", "one of \"text\", \"llmc\", \"megatron\"", "", "", "", "",
       {}},
      {"data", "tokenizer", "string", "\"bytes\" for text, \"gpt2\" for llmc/megatron with vocab_size 50257, else \"none\"",
       "\"bytes\"", "one of \"gpt2\", \"bytes\", \"none\"", "", "", "", "", {}},
      {"data", "path", "string", "\"\"", "\"\"", "a file path (or glob for llmc)", "", "", "", "", {}},
      {"data", "val_path", "string", "\"\"", "\"\"", "empty, or a file path", "", "", "", "", {}},
      {"data", "order", "string", "\"sequential\"", "\"sequential\"", "one of \"sequential\", \"shuffle\"", "", "", "",
       "", {}},
      {"data", "seed", "integer", "1234", "1234", "an integer in [0, 2147483647]", "0", "-1", kBig, kBigBad, {}},
      {"data", "val_every", "integer", "0", "0", "an integer in [0, 1099511627776]", "0", "-1", k2p40, k2p40Bad,
       {"data.val_path=v.txt"}},
      {"data", "val_steps", "integer", "1", "1", "\"all\" or an integer in [1, 2147483647]", "1", "0", kBig, kBigBad, {}},
      {"checkpoint", "dir", "string", "\"\"", "\"\"", "empty, or a directory path", "", "", "", "", {}},
      {"checkpoint", "every_steps", "integer", "0", "0", "an integer in [0, 1099511627776]", "0", "-1", k2p40, k2p40Bad,
       {"checkpoint.dir=ckpt"}},
      {"checkpoint", "every_minutes", "float", "0", "0.0", "a number >= 0", "0.0", "-0.5", "1e300", "inf",
       {"checkpoint.dir=ckpt"}},
      {"checkpoint", "keep", "integer", "2", "2", "an integer in [0, 2147483647]", "0", "-1", kBig, kBigBad, {}},
      {"checkpoint", "resume", "string", "\"auto\"", "\"auto\"",
       "\"auto\", \"required\", \"never\" or the path of a checkpoint", "", "", "", "", {}},
      {"checkpoint", "allow_fresh_restart", "boolean", "false", "false", "true or false", "", "", "", "", {}},
      {"runtime", "backend", "string", "\"cpu\"", "\"cpu\"", "one of \"cpu\", \"cuda\"", "", "", "", "", {}},
      {"runtime", "metrics", "string", "\"\"", "\"\"", "empty, or a file path", "", "", "", "", {}},
      {"runtime", "log_every", "integer", "1", "1", "an integer in [1, 2147483647]", "1", "0", kBig, kBigBad, {}},
      {"runtime", "mpi_wait", "string", "\"block\"", "\"block\"", "one of \"block\", \"poll\"", "", "", "", "", {}},
      {"runtime", "comm", "string", "\"nccl\" on cuda, \"mpi\" on cpu", "\"mpi\"", "one of \"mpi\", \"nccl\"", "", "",
       "", "", {}},
      {"runtime", "peak_tflops", "float", "0", "0.0", "a number >= 0", "0.0", "-0.5", "1e300", "inf", {}},
      {"runtime", "trace", "string", "\"\"", "\"\"", "empty, or a file path", "", "", "", "", {}},
      {"runtime", "op_profile", "string", "\"\"", "\"\"", "empty, or a file path", "", "", "", "", {}},
      {"runtime", "collective_timeout_s", "float", "300", "300.0", "a number >= 0", "0.0", "-0.5", "1e300", "inf", {}},
      {"runtime", "checkpoint_timeout_s", "float", "3600", "3600.0", "a number >= 0", "0.0", "-0.5", "1e300", "inf", {}},
      {"runtime", "memory_check", "boolean", "true", "true", "true or false", "", "", "", "", {}},
      {"runtime", "on_signal", "string", "\"checkpoint-exit\"", "\"checkpoint-exit\"",
       "one of \"checkpoint-exit\", \"checkpoint-continue\"", "", "", "", "", {}},
  };
}

std::string node_text(const toml::node& n) {
  std::ostringstream os;
  n.visit([&](const auto& v) { os << v; });
  return os.str();
}

TEST(DeckDefaults, TableCoversEverySchemaKeyInOrder) {
  const auto rows = key_rows();
  const auto& schema = deck::schema();
  ASSERT_EQ(rows.size(), schema.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(schema[i].section + "." + schema[i].key, rows[i].section + "." + rows[i].key) << "row " << i;
  }
  EXPECT_EQ(deck::sections(), (std::vector<std::string>{"model", "mesh", "train", "data", "checkpoint", "runtime"}));
}

TEST(DeckDefaults, DocumentedTypeDefaultAndRange) {
  const auto rows = key_rows();
  const auto& schema = deck::schema();
  ASSERT_EQ(rows.size(), schema.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    SCOPED_TRACE(rows[i].section + "." + rows[i].key);
    EXPECT_EQ(schema[i].type, rows[i].type);
    EXPECT_EQ(schema[i].default_text, rows[i].default_doc);
    EXPECT_EQ(schema[i].allowed, rows[i].allowed);
    EXPECT_FALSE(schema[i].doc.empty());
  }
}

// The empty deck resolves every key to its documented default.
TEST(DeckDefaults, EmptyDeckResolvesToDocumentedDefaults) {
  const Config cfg = parse("");
  // The defaults train bytes of text with GPT-2's vocabulary size: said, not refused.
  ASSERT_EQ(cfg.warnings.size(), 1u);
  EXPECT_NE(cfg.warnings[0].find("trains on bytes"), std::string::npos) << cfg.warnings[0];
  const toml::table resolved = toml::parse(cfg.resolved_toml);
  for (const auto& r : key_rows()) {
    SCOPED_TRACE(r.section + "." + r.key);
    const toml::node* got = resolved[r.section][r.key].node();
    ASSERT_NE(got, nullptr);
    const toml::table want = toml::parse("v = " + r.default_toml);
    EXPECT_EQ(node_text(*got), node_text(*want.get("v")));
    EXPECT_EQ(got->type(), want.get("v")->type());
  }
}

// Writing the documented default explicitly changes nothing.
TEST(DeckDefaults, ExplicitDefaultEqualsAbsentKey) {
  const std::string base = parse("").resolved_toml;
  for (const auto& r : key_rows()) {
    // derived / descriptive defaults
    if (r.key == "ffn_hidden" || r.key == "layers_per_stage" || r.key == "comm" || r.key == "tokenizer" ||
        r.key == "kv_heads" || r.key == "norm" || r.key == "positions" || r.key == "mlp")
      continue;
    SCOPED_TRACE(r.section + "." + r.key);
    EXPECT_EQ(parse(fmt::format("[{}]\n{} = {}\n", r.section, r.key, r.default_doc)).resolved_toml, base);
  }
}

TEST(DeckDefaults, EmptyDeckIsConfigDefaultsWithDerivedFfn) {
  const Config c = parse("");
  const Config d;
  // The documented defaults, written out.
  EXPECT_EQ(c.model.vocab_size, 50257);
  EXPECT_EQ(c.model.seq_len, 1024);
  EXPECT_EQ(c.model.layers, 12);
  EXPECT_EQ(c.model.hidden, 768);
  EXPECT_EQ(c.model.heads, 12);
  EXPECT_EQ(c.model.ffn_hidden, 4 * 768);
  EXPECT_EQ(d.model.ffn_hidden, 0);
  EXPECT_TRUE(c.model.tie_embeddings);
  EXPECT_DOUBLE_EQ(c.model.init_std, 0.02);
  EXPECT_EQ(c.model.seed, 1234u);
  EXPECT_EQ(c.model.init_from, "");
  EXPECT_EQ(c.model.vocab_pad_to, 128);
  EXPECT_EQ(c.mesh.tp, 1);
  EXPECT_EQ(c.mesh.pp, 1);
  EXPECT_EQ(c.mesh.dp, 1);
  EXPECT_EQ(c.mesh.order, "tp-dp-pp");
  EXPECT_EQ(c.mesh.schedule, Schedule::OneFOneB);
  EXPECT_EQ(c.mesh.virtual_stages, 1);
  EXPECT_FALSE(c.mesh.sequence_parallel);
  EXPECT_EQ(c.mesh.zero, 0);
  EXPECT_FALSE(c.mesh.strict_placement);
  EXPECT_TRUE(c.mesh.layers_per_stage.empty());
  EXPECT_DOUBLE_EQ(c.mesh.bucket_mb, 25.0);
  EXPECT_EQ(c.train.steps, 10);
  EXPECT_EQ(c.train.micro_batch, 1);
  EXPECT_EQ(c.train.global_batch, 8);
  EXPECT_DOUBLE_EQ(c.train.lr, 6e-4);
  EXPECT_DOUBLE_EQ(c.train.min_lr, 0.0);
  EXPECT_EQ(c.train.warmup_steps, 0);
  EXPECT_EQ(c.train.lr_schedule, LrSchedule::Cosine);
  EXPECT_DOUBLE_EQ(c.train.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(c.train.beta1, 0.9);
  EXPECT_DOUBLE_EQ(c.train.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.train.eps, 1e-8);
  EXPECT_DOUBLE_EQ(c.train.grad_clip, 1.0);
  EXPECT_EQ(c.train.recompute, Recompute::None);
  EXPECT_EQ(c.train.precision, Precision::FP32);
  EXPECT_EQ(c.train.matmul_precision, MatmulPrecision::FP32);
  EXPECT_TRUE(c.train.bf16_parameters);
  EXPECT_EQ(c.data.format, DataFormat::Text);
  EXPECT_EQ(c.data.path, "");
  EXPECT_EQ(c.data.val_path, "");
  EXPECT_EQ(c.data.order, DataOrder::Sequential);
  EXPECT_EQ(c.data.seed, 1234u);
  EXPECT_EQ(c.data.val_every, 0);
  EXPECT_EQ(c.data.val_steps, 1);
  EXPECT_EQ(c.checkpoint.dir, "");
  EXPECT_EQ(c.checkpoint.every_steps, 0);
  EXPECT_DOUBLE_EQ(c.checkpoint.every_minutes, 0.0);
  EXPECT_EQ(c.checkpoint.keep, 2);
  EXPECT_EQ(c.checkpoint.resume, "auto");
  EXPECT_EQ(c.runtime.backend, Backend::Cpu);
  EXPECT_EQ(c.runtime.metrics, "");
  EXPECT_EQ(c.runtime.log_every, 1);
  EXPECT_EQ(c.runtime.mpi_wait, MpiWait::Block);
  EXPECT_DOUBLE_EQ(c.runtime.peak_tflops, 0.0);
  EXPECT_EQ(c.runtime.trace, "");
  EXPECT_EQ(c.source, "deck.toml");
  // Derived figures of the defaults.
  EXPECT_EQ(c.micro_batches_per_step(), 8);
  EXPECT_EQ(c.tokens_per_step(), 8 * 1024);
  EXPECT_EQ(parameter_count(c.model), 124439808);  // GPT-2 small
}

// Each bound: the extreme allowed value is accepted, the next one beyond it is rejected with the key's
// range in the message. The value sits on line 2 of the deck, right after "key = ".
TEST(DeckDefaults, EveryNumericBoundary) {
  int checked = 0;
  for (const auto& r : key_rows()) {
    SCOPED_TRACE(r.section + "." + r.key);
    const auto deck = [&](const std::string& v) { return fmt::format("[{}]\n{} = {}\n", r.section, r.key, v); };
    const auto rejected = [&](const std::string& v) {
      return fmt::format("deck.toml:2:{}: [{}] {} = {}: out of range; allowed: {}", r.key.size() + 4, r.section, r.key,
                         v, r.allowed);
    };
    const struct {
      const std::string& ok;
      const std::string& bad;
      bool high;
    } bounds[] = {{r.low_ok, r.low_bad, false}, {r.high_ok, r.high_bad, true}};
    for (const auto& b : bounds) {
      if (b.ok.empty()) continue;
      EXPECT_EQ(deck_error(deck(b.ok), context_for(r, b.high)), "<no error>") << r.key << " = " << b.ok;
      EXPECT_EQ(deck_error(deck(b.bad), context_for(r, b.high)), rejected(b.bad));
      checked += 2;
    }
  }
  // 26 integer + 16 float keys, two bounds each, both sides; not the upper bounds of hidden, heads and kv_heads.
  EXPECT_EQ(checked, 4 * 42 - 6);
}

TEST(DeckDefaults, AcceptedBoundaryValuesAreStored) {
  EXPECT_EQ(parse("[mesh]\ntp = 65536\n", {"model.heads=65536", "model.hidden=65536"}).mesh.tp, 65536);
  EXPECT_EQ(parse("[train]\nsteps = 1099511627776\n").train.steps, int64_t(1) << 40);
  EXPECT_EQ(parse("[model]\nseed = 2147483647\n").model.seed, 2147483647u);
  EXPECT_EQ(parse("[mesh]\nzero = 2\n").mesh.zero, 2);
  EXPECT_DOUBLE_EQ(parse("[train]\neps = 1.0\n").train.eps, 1.0);
  EXPECT_DOUBLE_EQ(parse("[train]\nlr = 1\n").train.lr, 1.0);  // an integer is a valid float value
}

// runtime.comm follows the backend unless given: NCCL on the GPU, MPI on the host; the resolved deck
// writes the value chosen, so a restart with another default reads the same.
TEST(DeckRuntime, CommDefaultsToTheBackendsTransport) {
  EXPECT_EQ(parse("").runtime.comm, Comm::Mpi);
  const Config cuda = parse("[runtime]\nbackend = \"cuda\"\n");
  EXPECT_EQ(cuda.runtime.comm, Comm::Nccl);
  EXPECT_THAT(cuda.resolved_toml, HasSubstr("comm = 'nccl'"));
  EXPECT_EQ(parse("[runtime]\nbackend = \"cuda\"\ncomm = \"mpi\"\n").runtime.comm, Comm::Mpi);
  EXPECT_EQ(parse("[runtime]\ncomm = \"mpi\"\n").runtime.comm, Comm::Mpi);
}

// mesh.dp = "auto": the world size over tp*pp, resolved (and written resolved) once the world is known.
TEST(DeckMesh, AutoDpIsWorldOverTpTimesPp) {
  const Config c = parse("[mesh]\ntp = 2\npp = 2\ndp = \"auto\"\n", {}, 8);
  EXPECT_EQ(c.mesh.dp, 2);
  EXPECT_NE(c.resolved_toml.find("dp = 2"), std::string::npos) << c.resolved_toml;
  EXPECT_EQ(parse("", {"mesh.dp=auto"}, 4).mesh.dp, 4);
  EXPECT_EQ(parse("[mesh]\ntp = 2\ndp = \"auto\"\n", {"train.global_batch=6"}, 6).mesh.dp, 3);
  EXPECT_EQ(deck_error("[mesh]\ntp = 4\ndp = \"auto\"\n", {"model.heads=4", "model.hidden=64"}, 6),
            "deck.toml:3:6: [mesh] dp = \"auto\": the job's 6 ranks are not a multiple of tp*pp = 4*1 = 4");
  EXPECT_EQ(deck_error("[mesh]\ndp = \"auto\"\n"),
            "deck.toml:2:6: [mesh] dp = \"auto\" needs the number of ranks: run under mpiexec/srun, or `trident check "
            "--ranks N`");
  EXPECT_THAT(deck_error("[mesh]\ndp = \"many\"\n"), HasSubstr("neither an integer nor \"auto\""));
}

// data.tokenizer: derived from the format and vocabulary when absent; what contradicts the data refused.
TEST(Deck, TokenizerFollowsTheDataUnlessGiven) {
  EXPECT_EQ(parse("").data.tokenizer, Tokenizer::Bytes);
  EXPECT_EQ(parse("[data]\nformat = \"llmc\"\n", {"model.vocab_size=50257"}).data.tokenizer, Tokenizer::Gpt2);
  EXPECT_EQ(parse("[data]\nformat = \"megatron\"\n", {"model.vocab_size=50304"}).data.tokenizer, Tokenizer::None);
  EXPECT_EQ(parse("[data]\nformat = \"llmc\"\ntokenizer = \"gpt2\"\n", {"model.vocab_size=50304"}).data.tokenizer,
            Tokenizer::Gpt2);
  EXPECT_EQ(deck_error("[data]\ntokenizer = \"gpt2\"\n"),
            "deck.toml:2:13: [data] format = \"text\" reads bytes as token ids, so [data] tokenizer must be \"bytes\", "
            "not \"gpt2\" (`trident data prepare` makes GPT-2 tokens from text)");
  EXPECT_EQ(deck_error("[data]\nformat = \"llmc\"\ntokenizer = \"gpt2\"\n", {"model.vocab_size=1000"}),
            "deck.toml:3:13: [data] tokenizer = \"gpt2\" makes ids up to 50256, so [model] vocab_size = 1000 must be "
            ">= 50257");
}

// data.val_steps = "all": the whole validation data, written back as "all".
TEST(Deck, ValStepsAll) {
  const Config c = parse("[data]\nval_steps = \"all\"\n");
  EXPECT_EQ(c.data.val_steps, kValStepsAll);
  EXPECT_EQ(toml::parse(c.resolved_toml)["data"]["val_steps"].value<std::string>(), "all");
  EXPECT_EQ(parse("", {"data.val_steps=all"}).data.val_steps, kValStepsAll);
  EXPECT_EQ(deck_error("[data]\nval_steps = \"every\"\n"),
            "deck.toml:2:13: [data] val_steps = 'every': neither an integer nor \"all\"; allowed: \"all\" or an "
            "integer in [1, 2147483647]");
}

// ---------------------------------------------------------------------------------------------------
// Warnings, overrides, paths, round trip.

TEST(DeckWarnings, ZeroWithOneDpRank) {
  const Config c = parse("[mesh]\nzero = 1\n", {"model.vocab_size=256"});
  EXPECT_EQ(c.warnings, std::vector<std::string>{"deck.toml:2:8: [mesh] zero = 1 has no effect with dp = 1"});
  EXPECT_TRUE(parse("[mesh]\nzero = 1\ndp = 2\n", {"model.vocab_size=256"}).warnings.empty());
}

// Byte-level text with a GPT-2-sized vocabulary (the defaults): trains, but says that only 256 ids are
// used and how to get GPT-2 tokens; naming where each value came from.
TEST(DeckWarnings, TextWithMoreThan256IdsSaysItTrainsOnBytes) {
  const std::string hint =
      "; for GPT-2 tokens run `trident data prepare TEXT -o PREFIX` and train on its shards with [data] format = "
      "\"llmc\"";
  EXPECT_EQ(parse("[model]\nvocab_size = 50257\n[data]\nformat = \"text\"\n").warnings,
            std::vector<std::string>{"deck.toml:4:10: [data] format = \"text\" trains on bytes: token ids 0-255 use "
                                     "only 256 of the 50257 ids of [model] vocab_size (deck.toml:2:14)" + hint});
  EXPECT_EQ(parse("", {"model.vocab_size=50304"}).warnings,
            std::vector<std::string>{"deck.toml: [data] format = \"text\" trains on bytes: token ids 0-255 use only "
                                     "256 of the 50304 ids of [model] vocab_size (--set model.vocab_size=50304)" + hint});
  EXPECT_TRUE(parse("[model]\nvocab_size = 256\n[data]\nformat = \"text\"\n").warnings.empty());
  EXPECT_TRUE(parse("[data]\nformat = \"llmc\"\n").warnings.empty());
}

TEST(DeckWarnings, OneFOneBWithFewerMicroBatchesThanStages) {
  EXPECT_EQ(parse("[mesh]\npp = 4\n[train]\nglobal_batch = 2\n", {"model.vocab_size=256"}).warnings,
            std::vector<std::string>{"deck.toml:1:1: 1f1b with 2 micro-batch(es) per step and pp = 4: fewer "
                                     "micro-batches than stages leaves most of the pipeline idle"});
  EXPECT_EQ(parse("[mesh]\npp = 4\nschedule = \"1f1b\"\n[train]\nglobal_batch = 2\n", {"model.vocab_size=256"}).warnings,
            std::vector<std::string>{"deck.toml:3:12: 1f1b with 2 micro-batch(es) per step and pp = 4: fewer "
                                     "micro-batches than stages leaves most of the pipeline idle"});
  EXPECT_TRUE(parse("[mesh]\npp = 4\n[train]\nglobal_batch = 4\n", {"model.vocab_size=256"}).warnings.empty());
  EXPECT_TRUE(
      parse("[mesh]\npp = 4\nschedule = \"gpipe\"\n[train]\nglobal_batch = 2\n", {"model.vocab_size=256"}).warnings.empty());
}

TEST(DeckOverrides, ValuesAreTypedAsToml) {
  const Config c = parse("[mesh]\nschedule = \"gpipe\"\n",
                         {"mesh.schedule=1f1b", "runtime.metrics=/tmp/m.jsonl", "mesh.tp=2", "train.lr=3e-4",
                          "mesh.sequence_parallel=true", "data.path=\"true\"", "mesh.order=dp-tp-pp",
                          "model.init_std=1", "data.val_path=data.bin"});
  EXPECT_EQ(c.mesh.schedule, Schedule::OneFOneB);
  EXPECT_EQ(c.runtime.metrics, "/tmp/m.jsonl");
  EXPECT_EQ(c.mesh.tp, 2);
  EXPECT_DOUBLE_EQ(c.train.lr, 3e-4);
  EXPECT_TRUE(c.mesh.sequence_parallel);
  EXPECT_EQ(c.data.path, "true");
  EXPECT_EQ(c.mesh.order, "dp-tp-pp");
  EXPECT_DOUBLE_EQ(c.model.init_std, 1.0);
  EXPECT_EQ(c.data.val_path, "data.bin");
}

TEST(DeckOverrides, TypedValuesAreCheckedLikeTheDeck) {
  // `true` is a TOML boolean, so it is no string; quoted, it is.
  EXPECT_EQ(deck_error("", {"data.path=true"}),
            "--set data.path=true: [data] path = true: wrong type (boolean); allowed: a file path (or glob for llmc)");
  // "2" quoted is a string, not an integer.
  EXPECT_EQ(deck_error("", {"mesh.tp=\"2\""}),
            "--set mesh.tp=\"2\": [mesh] tp = '2': wrong type (string); allowed: an integer in [1, 65536]");
  EXPECT_EQ(deck_error("", {"train.lr=-1"}),
            "--set train.lr=-1: [train] lr = -1: out of range; allowed: a number >= 0");
}

TEST(DeckOverrides, ArraysSectionsAndPrecedence) {
  const Config c = parse("[mesh]\ntp = 4\n", {"mesh.tp=2", "mesh.pp=2", "mesh.layers_per_stage=[5, 7]", "mesh.tp=1"});
  EXPECT_EQ(c.mesh.tp, 1);  // the last --set wins over the deck and the earlier --set
  EXPECT_EQ(c.mesh.pp, 2);
  EXPECT_EQ(c.mesh.layers_per_stage, (std::vector<int64_t>{5, 7}));
  // A section the deck lacks is created by --set.
  EXPECT_EQ(parse("", {"checkpoint.dir=ckpt", "checkpoint.every_steps=5"}).checkpoint.every_steps, 5);
  // The resolved deck records overridden values.
  EXPECT_THAT(parse("", {"mesh.schedule=gpipe"}).resolved_toml, HasSubstr("schedule = 'gpipe'"));
}

TEST(DeckPaths, RelativeInputPathsResolveAgainstTheDeckDirectory) {
  const std::string dir = test::make_temp_dir("trident-deck");
  const std::string deck = dir + "/decks/run.toml";
  test::write_file(deck,
                   "[model]\ninit_from = \"weights/gpt2.safetensors\"\n"
                   "[data]\nformat = \"llmc\"\npath = \"../data/train_*.bin\"\nval_path = \"/abs/val.bin\"\n"
                   "[checkpoint]\ndir = \"ckpt\"\n[runtime]\nmetrics = \"m.jsonl\"\n");
  const Config c = load_deck(deck);
  EXPECT_EQ(c.source, deck);
  EXPECT_EQ(c.model.init_from, dir + "/decks/weights/gpt2.safetensors");
  EXPECT_EQ(c.data.path, dir + "/data/train_*.bin");
  EXPECT_EQ(c.data.val_path, "/abs/val.bin");  // absolute paths are kept
  // Output paths stay relative to the working directory.
  EXPECT_EQ(c.checkpoint.dir, "ckpt");
  EXPECT_EQ(c.runtime.metrics, "m.jsonl");
  // Paths given with --set are command-line paths: relative to the working directory.
  EXPECT_EQ(load_deck(deck, {"data.path=train.bin"}).data.path, "train.bin");
  // A deck name without a directory, and in-memory text, leave paths alone.
  EXPECT_EQ(parse("[data]\npath = \"x.bin\"\n").data.path, "x.bin");
  EXPECT_EQ(parse_deck("[data]\npath = \"x.bin\"\n", "<string>").data.path, "x.bin");
  EXPECT_EQ(parse_deck("[data]\npath = \"x.bin\"\n", "sub/dir/deck.toml").data.path, "sub/dir/x.bin");
  fs::remove_all(dir);
}

TEST(DeckPaths, LoadDeckErrors) {
  const std::string dir = test::make_temp_dir("trident-deck");
  try {
    load_deck(dir);
    ADD_FAILURE() << "a directory was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), dir + ": is a directory, not a deck file");
  }
  try {
    load_deck(dir + "/missing.toml");
    ADD_FAILURE() << "a missing file was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), dir + "/missing.toml: cannot read the deck file (No such file or directory)");
  }
  // Messages name the deck's path as given.
  test::write_file(dir + "/bad.toml", "[mesh]\n\ntp = 0\n");
  try {
    load_deck(dir + "/bad.toml");
    ADD_FAILURE() << "tp = 0 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              dir + "/bad.toml:3:6: [mesh] tp = 0: out of range; allowed: an integer in [1, 65536]");
  }
  fs::remove_all(dir);
}

// Every field, for the round trip.
void expect_same(const Config& a, const Config& b) {
#define SAME(f) EXPECT_EQ(a.f, b.f) << #f
  SAME(model.vocab_size); SAME(model.seq_len); SAME(model.layers); SAME(model.hidden); SAME(model.heads);
  SAME(model.ffn_hidden); SAME(model.tie_embeddings); SAME(model.init_std); SAME(model.seed);
  SAME(model.init_from); SAME(model.vocab_pad_to);
  SAME(mesh.tp); SAME(mesh.pp); SAME(mesh.dp); SAME(mesh.order); SAME(mesh.schedule); SAME(mesh.virtual_stages);
  SAME(mesh.sequence_parallel); SAME(mesh.zero); SAME(mesh.strict_placement); SAME(mesh.layers_per_stage);
  SAME(mesh.bucket_mb);
  SAME(mesh.overlap_grad_reduce); SAME(mesh.grad_reduce_dtype);
  SAME(train.steps); SAME(train.micro_batch); SAME(train.global_batch); SAME(train.lr); SAME(train.min_lr);
  SAME(train.warmup_steps); SAME(train.lr_schedule); SAME(train.weight_decay); SAME(train.beta1);
  SAME(train.beta2); SAME(train.eps); SAME(train.grad_clip); SAME(train.recompute); SAME(train.precision);
  SAME(train.matmul_precision);
  SAME(data.format); SAME(data.path); SAME(data.val_path); SAME(data.order); SAME(data.seed); SAME(data.val_every);
  SAME(data.val_steps);
  SAME(checkpoint.dir); SAME(checkpoint.every_steps); SAME(checkpoint.every_minutes); SAME(checkpoint.keep);
  SAME(checkpoint.resume);
  SAME(runtime.backend); SAME(runtime.metrics); SAME(runtime.log_every); SAME(runtime.mpi_wait); SAME(runtime.comm);
  SAME(runtime.peak_tflops); SAME(runtime.trace);
  SAME(resolved_toml);
#undef SAME
}

// Every key set away from its default.
const char* kFullDeck = R"(# every key, none at its default
[model]
vocab_size = 50304
seq_len = 256
layers = 8
hidden = 512
heads = 8
ffn_hidden = 1536
tie_embeddings = false
init_std = 0.01
seed = 7
init_from = "/abs/gpt2.safetensors"
vocab_pad_to = 64

[mesh]
tp = 2
pp = 2
dp = 2
order = "dp-tp-pp"
schedule = "interleaved"
virtual_stages = 2
sequence_parallel = true
zero = 2
strict_placement = true
layers_per_stage = [1, 3, 2, 2]
bucket_mb = 12.5

[train]
steps = 100
micro_batch = 2
global_batch = 16
lr = 3e-4
min_lr = 3e-5
warmup_steps = 10
lr_schedule = "linear"
weight_decay = 0.05
beta1 = 0.8
beta2 = 0.99
eps = 1e-6
grad_clip = 0.5
recompute = "selective"
precision = "bf16"
bf16_parameters = false

[data]
format = "megatron"
path = "/abs/data_text_document"
val_path = "/abs/val_text_document"
order = "shuffle"
seed = 99
val_every = 50
val_steps = 4

[checkpoint]
dir = "/abs/ckpt"
every_steps = 25
every_minutes = 30.5
keep = 0
resume = "never"

[runtime]
backend = "cuda"
metrics = "/abs/m.jsonl"
log_every = 5
mpi_wait = "poll"
peak_tflops = 312.0
trace = "/abs/trace.json"
on_signal = "checkpoint-continue"
)";

TEST(DeckRoundTrip, EveryKeyIsReadAndResolvedTomlReparsesToTheSameConfig) {
  const Config c = parse_deck(kFullDeck, "deck.toml", {}, DeckOptions{8});
  EXPECT_TRUE(c.warnings.empty());
  EXPECT_EQ(c.model.vocab_size, 50304);
  EXPECT_EQ(c.model.ffn_hidden, 1536);
  EXPECT_FALSE(c.model.tie_embeddings);
  EXPECT_EQ(c.model.vocab_pad_to, 64);
  EXPECT_EQ(c.mesh.order, "dp-tp-pp");
  EXPECT_EQ(c.mesh.schedule, Schedule::Interleaved);
  EXPECT_EQ(c.mesh.layers_per_stage, (std::vector<int64_t>{1, 3, 2, 2}));
  EXPECT_DOUBLE_EQ(c.mesh.bucket_mb, 12.5);
  EXPECT_DOUBLE_EQ(c.train.min_lr, 3e-5);
  EXPECT_EQ(c.train.lr_schedule, LrSchedule::Linear);
  EXPECT_DOUBLE_EQ(c.train.eps, 1e-6);
  EXPECT_EQ(c.train.recompute, Recompute::Selective);
  EXPECT_EQ(c.train.precision, Precision::BF16);
  EXPECT_FALSE(c.train.bf16_parameters);
  EXPECT_FALSE(c.train.bf16_working_copy());
  EXPECT_EQ(c.data.format, DataFormat::Megatron);
  EXPECT_EQ(c.data.order, DataOrder::Shuffle);
  EXPECT_EQ(c.data.seed, 99u);
  EXPECT_DOUBLE_EQ(c.checkpoint.every_minutes, 30.5);
  EXPECT_EQ(c.checkpoint.keep, 0);
  EXPECT_EQ(c.checkpoint.resume, "never");
  EXPECT_EQ(c.runtime.backend, Backend::Cuda);
  EXPECT_EQ(c.runtime.mpi_wait, MpiWait::Poll);
  EXPECT_DOUBLE_EQ(c.runtime.peak_tflops, 312.0);
  EXPECT_EQ(c.runtime.trace, "/abs/trace.json");
  EXPECT_EQ(c.runtime.on_signal, OnSignal::CheckpointContinue);
  EXPECT_EQ(c.micro_batches_per_step(), 4);

  const Config again = parse_deck(c.resolved_toml, "<resolved>", {}, DeckOptions{8});
  expect_same(again, c);
}

TEST(DeckRoundTrip, DefaultsAndExampleDecks) {
  const Config d = parse("");
  expect_same(parse_deck(d.resolved_toml, "<resolved>"), d);
  for (const auto& e : fs::directory_iterator(kSourceDir + "/input")) {
    if (e.path().extension() != ".toml") continue;
    SCOPED_TRACE(e.path().string());
    const Config c = load_deck(e.path().string());
    expect_same(parse_deck(c.resolved_toml, "<resolved>"), c);
  }
}

// ---------------------------------------------------------------------------------------------------
// The example decks and the reference documentation.

std::vector<std::string> example_decks() {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(kSourceDir + "/input"))
    if (e.path().extension() == ".toml") v.push_back(e.path().string());
  std::sort(v.begin(), v.end());
  return v;
}

TEST(DeckExamples, EveryDeckInInputParses) {
  const auto decks = example_decks();
  for (const char* name : {"tiny.toml", "gpt2-124m.toml", "gpt3-175b.toml", "gpt-1t.toml"}) {
    EXPECT_TRUE(std::find(decks.begin(), decks.end(), kSourceDir + "/input/" + name) != decks.end()) << name;
  }
  for (const auto& path : decks) {
    SCOPED_TRACE(path);
    try {
      const Config c = load_deck(path);
      EXPECT_TRUE(c.warnings.empty()) << ::testing::PrintToString(c.warnings);
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

TEST(DeckExamples, TinyDeck) {
  const Config c = load_deck(kSourceDir + "/input/tiny.toml", {}, DeckOptions{1});
  EXPECT_EQ(c.model.vocab_size, 256);
  EXPECT_EQ(c.data.format, DataFormat::Text);
  EXPECT_EQ(c.mesh.world_size(), 1);
  EXPECT_TRUE(fs::path(c.data.path).is_absolute()) << c.data.path;
}

TEST(DeckExamples, Gpt2Small) {
  const Config c = load_deck(kSourceDir + "/input/gpt2-124m.toml", {}, DeckOptions{1});
  EXPECT_EQ(c.model.vocab_size, 50257);
  EXPECT_EQ(c.model.seq_len, 1024);
  EXPECT_EQ(c.model.layers, 12);
  EXPECT_EQ(c.model.hidden, 768);
  EXPECT_EQ(c.model.heads, 12);
  EXPECT_EQ(c.data.format, DataFormat::LlmC);
  EXPECT_EQ(parameter_count(c.model), 124439808);
  EXPECT_EQ(c.data.path, kSourceDir + "/input/data/fineweb_train_*.bin");
}

TEST(DeckExamples, Gpt3175BOn1024Ranks) {
  const Config c = load_deck(kSourceDir + "/input/gpt3-175b.toml", {}, DeckOptions{1024});
  EXPECT_EQ(c.mesh.tp, 8);
  EXPECT_EQ(c.mesh.pp, 16);
  EXPECT_EQ(c.mesh.dp, 8);
  EXPECT_EQ(c.model.layers, 96);
  EXPECT_EQ(c.model.hidden, 12288);
  EXPECT_EQ(c.model.heads, 96);
  EXPECT_EQ(c.model.seq_len, 2048);
  EXPECT_EQ(c.model.vocab_size, 51200);
  EXPECT_EQ(c.runtime.backend, Backend::Cuda);
  EXPECT_EQ(c.train.precision, Precision::BF16);
  EXPECT_NEAR(parameter_count(c.model) / 1e9, 175.0, 1.5);
  EXPECT_THAT(deck_error(read_text(kSourceDir + "/input/gpt3-175b.toml"), {}, 512),
              HasSubstr("[mesh] tp*pp*dp = 8*16*8 = 1024 but the job has 512 ranks"));
}

TEST(DeckExamples, Gpt1TOn4096Ranks) {
  const Config c = load_deck(kSourceDir + "/input/gpt-1t.toml", {}, DeckOptions{4096});
  EXPECT_EQ(c.mesh.tp, 8);
  EXPECT_EQ(c.mesh.pp, 64);
  EXPECT_EQ(c.mesh.dp, 8);
  EXPECT_EQ(c.model.layers, 128);
  EXPECT_EQ(c.model.hidden, 25600);
  EXPECT_EQ(c.model.heads, 160);
  EXPECT_EQ(c.model.seq_len, 2048);
  EXPECT_EQ(c.model.vocab_size, 51200);
  EXPECT_EQ(c.runtime.backend, Backend::Cuda);
  EXPECT_EQ(c.train.precision, Precision::BF16);
  EXPECT_NEAR(parameter_count(c.model) / 1e12, 1.0, 0.03);
}

TEST(DeckReference, ReadmeIsTheGeneratedReference) {
  const std::string readme = read_text(kSourceDir + "/input/README.md");
  EXPECT_EQ(readme, deck_reference_markdown())
      << "input/README.md is stale: regenerate it with `build/trident deck-reference > input/README.md`";
}

TEST(DeckReference, DocumentsEveryKeyWithDefaultAndRange) {
  const std::string md = deck_reference_markdown();
  for (const auto& k : deck::schema()) {
    EXPECT_THAT(md, HasSubstr(fmt::format("| `{}` | {} | `{}` | {} |", k.key, k.type, k.default_text, k.allowed)));
  }
  for (const auto& s : deck::sections()) EXPECT_THAT(md, HasSubstr("## [" + s + "]"));
}

// ---------------------------------------------------------------------------------------------------
// The command line.

// A [data] section whose file every Debian system has (base-files).
const std::string kTextData = "[data]\nformat = \"text\"\npath = \"/usr/share/common-licenses/GPL-3\"\n";

struct CliRun {
  int rc;
  std::string out, err;
};

// Runs the trident binary as a fresh singleton MPI process: the PMI variables of the test's own job
// (the test runs under mpiexec) are removed, or MPI_Init in the child would join the parent's job.
CliRun run_trident(const std::string& args, const std::string& dir) {
  const std::string out = dir + "/stdout.txt", err = dir + "/stderr.txt";
  std::string ignored;
  CliRun r;
  r.rc = test::run_command(
      fmt::format("( env -u PMI_FD -u PMI_RANK -u PMI_SIZE -u PMI_PORT -u PMI_ID -u MPI_LOCALNRANKS "
                  "-u MPI_LOCALRANKID {} {} >{} 2>{} )",
                  test::trident_binary(), args, out, err),
      &ignored);
  r.out = read_text(out);
  r.err = read_text(err);
  return r;
}

TEST(DeckCli, BadDeckExitsWithTwoAndNamesTheLine) {
  const std::string dir = test::make_temp_dir("trident-deck-cli");
  test::write_file(dir + "/bad.toml", "[model]\nlayers = 4\n\n[mesh]\ntp = 0\n");
  const CliRun r = run_trident("check " + dir + "/bad.toml", dir);
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.out + r.err,
              HasSubstr(dir + "/bad.toml:5:6: [mesh] tp = 0: out of range; allowed: an integer in [1, 65536]"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("deck OK")));

  test::write_file(dir + "/typo.toml", "[train]\nstep = 5\n");
  const CliRun t = run_trident("check " + dir + "/typo.toml", dir);
  EXPECT_EQ(t.rc, 2);
  EXPECT_THAT(t.out + t.err, HasSubstr(dir + "/typo.toml:2:1: unknown key 'step' in [train]; did you mean 'steps'?"));
  fs::remove_all(dir);
}

// A mistyped command is a usage error like a bad deck: exit 2, the closest command, the list.
TEST(DeckCli, UnknownCommandExitsWithTwoAndSuggestsTheClosest) {
  const std::string dir = test::make_temp_dir("trident-deck-cli");
  const CliRun r = run_trident("trian deck.toml", dir);
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("'trian' is not a `trident` command; did you mean 'train'? (commands: train, check,"));
  const CliRun c = run_trident("ckpt lsit " + dir, dir);
  EXPECT_EQ(c.rc, 2);
  EXPECT_THAT(c.err, HasSubstr("'lsit' is not a `trident ckpt` command; did you mean 'list'?"));
  const CliRun o = run_trident("check --no-such-option deck.toml", dir);  // CLI11's own usage errors
  EXPECT_EQ(o.rc, 2);
  EXPECT_THAT(o.out + o.err, HasSubstr("--no-such-option"));
  const CliRun v = run_trident("--version", dir);
  EXPECT_EQ(v.rc, 0);
  EXPECT_THAT(v.out, HasSubstr("trident "));
  fs::remove_all(dir);
}

// An error is a diagnostic: it belongs on stderr, not mixed into the resolved deck that `check` prints.
TEST(DeckCli, ErrorsGoToStderr) {
  const std::string dir = test::make_temp_dir("trident-deck-cli");
  test::write_file(dir + "/bad.toml", "[mesh]\ntp = 0\n");
  const CliRun r = run_trident("check " + dir + "/bad.toml", dir);
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr(dir + "/bad.toml:2:6: [mesh] tp = 0: out of range"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("out of range")));
  fs::remove_all(dir);
}

TEST(DeckCli, SetOverrides) {
  const std::string dir = test::make_temp_dir("trident-deck-cli");
  test::write_file(dir + "/ok.toml", "[mesh]\nschedule = \"gpipe\"\n" + kTextData);
  const CliRun r = run_trident("check --ranks 2 " + dir +
                                   "/ok.toml --set mesh.schedule=1f1b --set runtime.metrics=/tmp/m.jsonl "
                                   "--set train.lr=0.25 --set mesh.tp=2",
                               dir);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("schedule = '1f1b'"));
  EXPECT_THAT(r.out, HasSubstr("metrics = '/tmp/m.jsonl'"));
  EXPECT_THAT(r.out, HasSubstr("lr = 0.25"));
  EXPECT_THAT(r.out, HasSubstr("\ntp = 2\n"));
  EXPECT_THAT(r.out, HasSubstr("deck OK"));

  const CliRun bad = run_trident("check " + dir + "/ok.toml --set mesh.tp=0", dir);
  EXPECT_EQ(bad.rc, 2);
  EXPECT_THAT(bad.out + bad.err,
              HasSubstr("--set mesh.tp=0: [mesh] tp = 0: out of range; allowed: an integer in [1, 65536]"));

  const CliRun malformed = run_trident("check " + dir + "/ok.toml --set mesh.tp", dir);
  EXPECT_EQ(malformed.rc, 2);
  EXPECT_THAT(malformed.out + malformed.err,
              HasSubstr("--set mesh.tp: expected section.key=value (for example --set mesh.tp=2)"));
  fs::remove_all(dir);
}

TEST(DeckCli, EveryExampleDeckIsValidAndTinyTrainsHere) {
  const std::string dir = test::make_temp_dir("trident-deck-cli");
  for (const auto& path : example_decks()) {
    const CliRun r = run_trident("check --deck-only " + path, dir);
    EXPECT_EQ(r.rc, 0) << path << "\n" << r.err;
    EXPECT_THAT(r.out, HasSubstr("deck valid (--deck-only")) << path;
  }
  const CliRun tiny = run_trident("check " + kSourceDir + "/input/tiny.toml", dir);
  EXPECT_EQ(tiny.rc, 0) << tiny.err;
  EXPECT_THAT(tiny.out, HasSubstr("deck OK: `train` starts when launched on 1 rank(s)"));
  fs::remove_all(dir);
}

// The message of the logged line that ended the job, without the time, rank tag and "(rank r of n
// ends the job)" decorations, so that a singleton's and a parallel job's messages compare.
std::string error_message(const std::string& err) {
  static const std::regex line(R"(\[error\] (\[rank \d+\] )?(.*?)( \(rank \d+ of \d+ ends the job\))?$)");
  std::istringstream in(err);
  std::smatch m;
  for (std::string text; std::getline(in, text);)
    if (std::regex_search(text, m, line)) return m[2];
  return "(no error line in: " + err + ")";
}

// "deck OK" means the run starts: for every refusal of `train` before training, `check` refuses with the
// same exit code and the same message. Both run as singletons except the world-size case.
TEST(DeckCli, CheckRefusesWhatTrainRefusesWithTheSameMessage) {
  const std::string dir = test::make_temp_dir("trident-deck-cli");
  test::write_file(dir + "/short.txt", "too short");
  const std::string base = kSourceDir + "/input/tiny.toml";
  struct Case {
    std::string name, set;
    int rc;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"missing data", "--set data.path=" + dir + "/nothing.txt", 2, "nothing.txt"},
      {"data shorter than one window", "--set data.path=" + dir + "/short.txt", 2, "fewer than one window"},
      {"missing validation data", "--set data.val_path=" + dir + "/none.txt", 2, "none.txt"},
      {"empty data path", "--set data.path=''", 2, "[data] path is empty"},
      {"bf16 with tf32", "--set train.precision=bf16 --set train.matmul_precision=tf32", 2, "contradicts"},
      {"nccl on cpu", "--set runtime.comm=nccl --set mesh.dp=2", 2, "needs [runtime] backend = \"cuda\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const CliRun check = run_trident("check " + base + " " + c.set, dir);
    const std::string ranks = c.name == "nccl on cpu" ? "2" : "1";
    std::string ignored;
    const int train_rc = test::run_command(
        fmt::format("(cd {} && {} {} -n {} {} train {} {} >train.out 2>train.err)", dir, test::without_parent_mpi_env(),
                    test::local_mpiexec(), ranks, test::trident_binary(), base, c.set),
        &ignored);
    const std::string train_err = read_text(dir + "/train.err");
    EXPECT_EQ(train_rc, c.rc) << train_err;
    EXPECT_EQ(check.rc, c.rc) << check.err;
    EXPECT_THAT(check.err, HasSubstr(c.says));
    EXPECT_EQ(error_message(check.err), error_message(train_err));
    EXPECT_THAT(check.out, ::testing::Not(HasSubstr("deck OK")));
  }
  // The world size: `check --ranks 3` refuses what `mpiexec -n 3 trident train` refuses.
  const CliRun check = run_trident("check --ranks 3 " + base + " --set mesh.dp=2", dir);
  EXPECT_EQ(check.rc, 2);
  EXPECT_THAT(check.err, HasSubstr("--set mesh.dp=2: [mesh] tp*pp*dp = 1*1*2 = 2 but the job has 3 ranks (tp = 1 at " +
                                   base + ":12:6, pp = 1 at " + base + ":13:6, dp = 2 from --set mesh.dp=2)"));
  std::string ignored;
  test::run_command(fmt::format("(cd {} && {} {} -n 3 {} train {} --set mesh.dp=2 >train.out 2>train.err)", dir,
                                test::without_parent_mpi_env(), test::local_mpiexec(), test::trident_binary(), base),
                    &ignored);
  EXPECT_EQ(error_message(check.err), error_message(read_text(dir + "/train.err")));
  fs::remove_all(dir);
}

TEST(DeckCli, DeckReferenceMatchesReadme) {
  const std::string dir = test::make_temp_dir("trident-deck-cli");
  const CliRun r = run_trident("deck-reference", dir);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, read_text(kSourceDir + "/input/README.md"));
  fs::remove_all(dir);
}


// model.architecture = "llama" sets the components the deck leaves out; a key the deck gives wins.
TEST(DeckArchitecture, LlamaPresetAndExplicitKeys) {
  const Config l = parse("[model]\narchitecture = \"llama\"\nhidden = 4096\nheads = 32\n");
  EXPECT_EQ(l.model.norm, Norm::RmsNorm);
  EXPECT_EQ(l.model.positions, Positions::Rope);
  EXPECT_EQ(l.model.mlp, Mlp::SwiGlu);
  EXPECT_FALSE(l.model.bias);
  EXPECT_FALSE(l.model.tie_embeddings);
  EXPECT_EQ(l.model.kv_heads, 32);
  EXPECT_EQ(l.model.ffn_hidden, 11008);  // Llama 2 7B's: 8*4096/3 rounded up to a multiple of 256
  const Config mixed = parse(
      "[model]\narchitecture = \"llama\"\nnorm = \"layernorm\"\nbias = true\npositions = \"learned\"\n"
      "mlp = \"gelu\"\ntie_embeddings = true\nkv_heads = 4\n");
  EXPECT_EQ(mixed.model.norm, Norm::LayerNorm);
  EXPECT_EQ(mixed.model.positions, Positions::Learned);
  EXPECT_EQ(mixed.model.mlp, Mlp::Gelu);
  EXPECT_TRUE(mixed.model.bias);
  EXPECT_TRUE(mixed.model.tie_embeddings);
  EXPECT_EQ(mixed.model.kv_heads, 4);
  EXPECT_EQ(mixed.model.ffn_hidden, 4 * 768);
  // GPT-2 decks are unchanged: the same resolved components as before the keys existed.
  const Config g = parse("");
  EXPECT_EQ(g.model.architecture, Architecture::Gpt2);
  EXPECT_EQ(g.model.norm, Norm::LayerNorm);
  EXPECT_EQ(g.model.positions, Positions::Learned);
  EXPECT_EQ(g.model.mlp, Mlp::Gelu);
  EXPECT_TRUE(g.model.bias);
  EXPECT_EQ(g.model.kv_heads, g.model.heads);
}

TEST(DeckArchitecture, RulesNameTheLine) {
  EXPECT_EQ(deck_error("[model]\nnorm = \"rmsnorm\"\n"),
            "deck.toml:2:8: [model] norm = \"rmsnorm\" needs [model] architecture = \"llama\" (GPT-2's Hugging Face "
            "tensors, of [model] architecture = \"gpt2\", hold GPT-2's components only)");
  EXPECT_THAT(deck_error("[model]\nkv_heads = 4\n"), HasSubstr("deck.toml:2:12: [model] kv_heads = 4 needs [model] "
                                                               "architecture = \"llama\""));
  EXPECT_THAT(deck_error("[model]\npositions = \"rope\"\n"), HasSubstr("deck.toml:2:13: [model] positions"));
  EXPECT_THAT(deck_error("[model]\narchitecture = \"llama\"\nkv_heads = 5\n"),
              HasSubstr("deck.toml:3:12: [model] kv_heads = 5 does not divide heads = 12"));
  EXPECT_THAT(deck_error("[model]\narchitecture = \"llama\"\nkv_heads = 4\n[mesh]\ntp = 3\n"),
              HasSubstr("kv_heads = 4 and [mesh] tp = 3: one must divide the other"));
  EXPECT_THAT(deck_error("[model]\narchitecture = \"llama\"\nhidden = 36\nheads = 4\n"),
              HasSubstr("the head size hidden/heads = 9 must be even"));
  EXPECT_THAT(deck_error("[model]\narchitecture = \"llama\"\nnorm = \"layernorm\"\n"),
              HasSubstr("a LayerNorm without its bias is not supported"));
  EXPECT_THAT(deck_error("[model]\narchitecture = \"gpt3\"\n"), HasSubstr("allowed: one of \"gpt2\", \"llama\""));
  // tp 4 over 2 key/value heads (each on two ranks) and tp 2 over 8 are both fine.
  EXPECT_EQ(deck_error("[model]\narchitecture = \"llama\"\nkv_heads = 2\n[mesh]\ntp = 4\n"), "<no error>");
  EXPECT_EQ(deck_error("[model]\narchitecture = \"llama\"\nkv_heads = 2\n[mesh]\ntp = 2\n"), "<no error>");
}

// Parameter counts of published models (their model cards): Llama 3 8B 8,030,261,248 and TinyLlama 1.1B
// 1,100,048,384, from the decks in input/.
TEST(DeckExamples, LlamaShapesHaveTheirPublishedParameterCounts) {
  const Config l3 = load_deck(kSourceDir + "/input/llama3-8b.toml", {}, DeckOptions{8});
  EXPECT_EQ(parameter_count(l3.model), 8030261248);
  EXPECT_EQ(l3.model.kv_heads, 8);
  const Config tl = load_deck(kSourceDir + "/input/tinyllama-1.1b.toml", {}, DeckOptions{8});
  EXPECT_EQ(parameter_count(tl.model), 1100048384);
  const Config tiny = load_deck(kSourceDir + "/input/llama-tiny.toml", {}, DeckOptions{1});
  EXPECT_EQ(tiny.model.architecture, Architecture::Llama);
  EXPECT_EQ(tiny.model.kv_heads, 2);
}

}  // namespace
}  // namespace trident
