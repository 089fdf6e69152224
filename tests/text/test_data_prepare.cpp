// `trident data prepare` (src/data/prepare.hpp): the files it writes hold, read back by the trainer's
// own readers (open_token_stream), exactly tiktoken's tokens of every document with <|endoftext|> before
// each; the files are byte-for-byte the same over all ranks of the job and on one rank; the skips and
// replacements are counted; the command's errors name the file and line or offset and exit with 2.
#include <gtest/gtest.h>
#include <mpi.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include <filesystem>

#include "core/config.hpp"
#include "core/error.hpp"
#include "data/dataset.hpp"
#include "data/prepare.hpp"
#include "text_test_util.hpp"

namespace fs = std::filesystem;

namespace trident {
namespace {

using texttest::read_file;

// The inputs of every case, made once on rank 0 and shared through the file system:
//   docs.jsonl  the corpus cut at blank lines into documents, plus an empty text and a blank line
//   story.txt   a text file (one document); empty.txt: an empty one (skipped)
//   bad.txt     ill-formed UTF-8: Unicode's Table 3-8 example, 6 sequences replaced by U+FFFD
//   expected.jsonl: the texts as written (bad.txt's repaired as Unicode specifies), for tiktoken
const char kBadBytes[] = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
const std::string kBadRepaired = "a\uFFFD\uFFFD\uFFFDb\uFFFDc\uFFFD\uFFFDd";

struct Inputs {
  std::string dir;
  std::vector<std::string> files;
  std::vector<uint32_t> expected;  // tiktoken: for each non-empty document, 50256 then its ids
  bool have_reference = false;     // on every rank: tiktoken ran on rank 0
  int64_t documents = 0;
};

Inputs make_inputs(bool with_reference) {
  Inputs in;
  char dir[4096] = {};
  if (test::world_rank() == 0) {
    in.dir = test::make_temp_dir("trident-prepare");
    const std::string corpus = read_file(texttest::make_corpus(in.dir));
    std::string jsonl, expected_jsonl;
    const auto add = [&](const std::string& text, bool in_jsonl) {
      const std::string line = nlohmann::json{{"text", text}, {"source", "test"}}.dump() + "\n";
      if (in_jsonl) jsonl += line;
      expected_jsonl += line;
      if (!text.empty()) ++in.documents;
    };
    for (size_t pos = 0; pos < corpus.size();) {
      size_t end = corpus.find("\n\n", pos);
      end = end == std::string::npos ? corpus.size() : end + 2;
      add(corpus.substr(pos, end - pos), true);
      pos = end;
      if (in.documents == 3) {
        add("", true);
        jsonl += "  \n";  // a blank line
      }
    }
    test::write_file(in.dir + "/docs.jsonl", jsonl);
    const std::string story = "A text file is one document.\n\nIt's read whole:   spaces,\ttabs \u2014 and \U0001F600.\n";
    test::write_file(in.dir + "/story.txt", story);
    add(story, false);
    test::write_file(in.dir + "/empty.txt", "");
    test::write_file(in.dir + "/bad.txt", kBadBytes);
    add(kBadRepaired, false);
    test::write_file(in.dir + "/expected.jsonl", expected_jsonl);
    if (with_reference) in.expected = texttest::tiktoken_ids("documents", in.dir + "/expected.jsonl");
    std::snprintf(dir, sizeof dir, "%s", in.dir.c_str());
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  int have_reference = !in.expected.empty();
  MPI_Bcast(&have_reference, 1, MPI_INT, 0, MPI_COMM_WORLD);
  in.have_reference = have_reference != 0;
  in.dir = dir;
  in.files = {in.dir + "/docs.jsonl", in.dir + "/story.txt", in.dir + "/empty.txt", in.dir + "/bad.txt"};
  return in;
}

class DataPrepare : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { inputs_ = new Inputs(make_inputs(true)); }
  static void TearDownTestSuite() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (test::world_rank() == 0) fs::remove_all(inputs_->dir);
    delete inputs_;
  }
  void SetUp() override {
    // every rank together, so that none goes on into the collective run
    ASSERT_TRUE(inputs_->have_reference) << "no reference tokens from tiktoken";
  }

  // Options writing to DIR/NAME/out: small shards and batches, so that the files and the rounds are many.
  PrepareOptions options(const std::string& name, PreparedFormat format) const {
    PrepareOptions o;
    o.inputs = inputs_->files;
    o.output_prefix = inputs_->dir + "/" + name + "/out";
    o.format = format;
    o.val_documents = 5;
    o.shard_tokens = 100000;
    o.batch_bytes_per_rank = 64 << 10;
    return o;
  }
  static void make_dir(const std::string& prefix) {
    if (test::world_rank() == 0) fs::create_directories(fs::path(prefix).parent_path());
    MPI_Barrier(MPI_COMM_WORLD);
  }
  static std::vector<uint32_t> read_all(DataFormat format, const std::string& path) {
    const auto stream = open_token_stream(format, path, 50257);
    std::vector<int32_t> ids(static_cast<size_t>(stream->size()));
    stream->read(0, stream->size(), ids.data());
    return std::vector<uint32_t>(ids.begin(), ids.end());
  }
  // Prepares the same inputs on rank 0 alone and checks that it writes the same files, byte for byte.
  static void expect_same_files_on_one_rank(PrepareOptions o, const PrepareSummary& world) {
    if (test::world_rank() != 0) return;
    const std::string world_prefix = o.output_prefix;
    o.output_prefix = fs::path(world_prefix).parent_path().string() + "-one-rank/out";
    fs::create_directories(fs::path(o.output_prefix).parent_path());
    const PrepareSummary one = prepare_dataset(o, MPI_COMM_SELF);
    ASSERT_EQ(one.outputs.size(), world.outputs.size());
    for (size_t i = 0; i < one.outputs.size(); ++i) {
      EXPECT_EQ(fs::path(one.outputs[i]).filename(), fs::path(world.outputs[i]).filename());
      EXPECT_TRUE(read_file(one.outputs[i]) == read_file(world.outputs[i]))
          << world.outputs[i] << " differs between " << test::world_size() << " rank(s) and one";
    }
  }

  static Inputs* inputs_;
};
Inputs* DataPrepare::inputs_ = nullptr;

TEST_F(DataPrepare, LlmcShardsHoldTiktokensTokens) {
  const PrepareOptions o = options("llmc", PreparedFormat::llmc);
  make_dir(o.output_prefix);
  const PrepareSummary s = prepare_dataset(o, MPI_COMM_WORLD);
  if (test::world_rank() != 0) return;
  const std::vector<uint32_t>& expected = inputs_->expected;
  EXPECT_EQ(s.documents, inputs_->documents);
  EXPECT_EQ(s.val_documents, 5);
  EXPECT_EQ(s.tokens, static_cast<int64_t>(expected.size()));
  EXPECT_EQ(s.empty_documents, 2);  // "" in the JSONL and empty.txt
  EXPECT_EQ(s.blank_lines, 1);
  EXPECT_EQ(s.invalid_utf8_sequences, 6);
  EXPECT_EQ(s.documents_with_invalid_utf8, 1);
  EXPECT_EQ(s.first_invalid_utf8, inputs_->dir + "/bad.txt byte 1");

  // llm.c's names: the validation shard first, numbering across both splits.
  ASSERT_GE(s.outputs.size(), 3u);
  for (size_t i = 0; i < s.outputs.size(); ++i)
    EXPECT_EQ(fs::path(s.outputs[i]).filename().string(), fmt::format("out_{}_{:06d}.bin", i == 0 ? "val" : "train", i));
  const std::vector<uint32_t> val = read_all(DataFormat::LlmC, o.output_prefix + "_val_*.bin");
  const std::vector<uint32_t> train = read_all(DataFormat::LlmC, o.output_prefix + "_train_*.bin");
  EXPECT_EQ(static_cast<int64_t>(val.size()), s.val_tokens);
  std::vector<uint32_t> all = val;
  all.insert(all.end(), train.begin(), train.end());
  EXPECT_TRUE(all == expected) << "the shards differ from tiktoken's tokens";
  EXPECT_EQ(std::count(val.begin(), val.end(), 50256u), 5);
  for (size_t i = 1; i + 1 < s.outputs.size(); ++i)  // full training shards but the last
    EXPECT_EQ(fs::file_size(s.outputs[i]), 1024u + 2 * 100000u) << s.outputs[i];
  for (const auto& entry : fs::directory_iterator(fs::path(o.output_prefix).parent_path()))
    EXPECT_EQ(entry.path().extension(), ".bin") << "left behind: " << entry.path();
  expect_same_files_on_one_rank(o, s);
}

TEST_F(DataPrepare, MegatronDatasetHoldsOneSequencePerDocument) {
  const PrepareOptions o = options("megatron", PreparedFormat::megatron);
  make_dir(o.output_prefix);
  const PrepareSummary s = prepare_dataset(o, MPI_COMM_WORLD);
  if (test::world_rank() != 0) return;
  const std::vector<uint32_t>& expected = inputs_->expected;
  ASSERT_EQ(s.outputs.size(), 4u);
  const std::vector<uint32_t> val = read_all(DataFormat::Megatron, o.output_prefix + "_val");
  const std::vector<uint32_t> train = read_all(DataFormat::Megatron, o.output_prefix + "_train");
  std::vector<uint32_t> all = val;
  all.insert(all.end(), train.begin(), train.end());
  EXPECT_TRUE(all == expected) << "the dataset differs from tiktoken's tokens";
  // The index: uint16 tokens (dtype 8), one sequence per training document, each starting with 50256.
  const std::string idx = read_file(o.output_prefix + "_train.idx");
  uint64_t sequences = 0;
  std::memcpy(&sequences, idx.data() + 18, 8);
  EXPECT_EQ(static_cast<uint8_t>(idx[17]), 8);
  EXPECT_EQ(static_cast<int64_t>(sequences), s.documents - 5);
  EXPECT_EQ(static_cast<int64_t>(std::count(train.begin(), train.end(), 50256u)), s.documents - 5);
  expect_same_files_on_one_rank(o, s);
}

// The command line, on one rank (each run is its own job).
struct CommandRun {
  int status;
  std::string output;
};
CommandRun trident_data(const std::string& args) {
  CommandRun r;
  r.status = test::run_command(fmt::format("{} timeout -k 5 120 {} data prepare {}", test::without_parent_mpi_env(),
                                           test::trident_binary(), args),
                               &r.output);
  return r;
}

class DataPrepareCommand : public DataPrepare {
 protected:
  static void SetUpTestSuite() { inputs_ = new Inputs(make_inputs(false)); }
  void SetUp() override {
    if (test::world_size() > 1) GTEST_SKIP() << "not applicable: the command-line cases run on one rank";
  }
};

TEST_F(DataPrepareCommand, PreparesAndSummarises) {
  const std::string d = inputs_->dir;
  fs::create_directories(d + "/cli");
  const CommandRun r = trident_data(fmt::format("{0}/docs.jsonl {0}/story.txt {0}/empty.txt {0}/bad.txt -o {0}/cli/x "
                                         "--val-documents 2 --shard-tokens 1000000",
                                         d));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(fmt::format("summary: {} documents (2 validation, {} training)", inputs_->documents,
                                      inputs_->documents - 2)),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("skipped: 2 empty document(s), 1 blank JSONL line(s)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(fmt::format("ill-formed UTF-8: 6 sequence(s) in 1 document(s) replaced by U+FFFD (first: "
                                      "{}/bad.txt byte 1)",
                                      d)),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("wrote " + d + "/cli/x_val_000000.bin"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("wrote " + d + "/cli/x_train_000001.bin"), std::string::npos) << r.output;
  // A second run over the same prefix is refused: fewer shards would leave old ones behind.
  const CommandRun again = trident_data(fmt::format("{0}/story.txt -o {0}/cli/x", d));
  EXPECT_EQ(again.status, 2) << again.output;
  EXPECT_NE(again.output.find(d + "/cli/x_val_000000.bin exists"), std::string::npos) << again.output;
}

TEST_F(DataPrepareCommand, BadInputsEndWithStatus2NamingTheFile) {
  const std::string d = inputs_->dir;
  test::write_file(d + "/broken.jsonl", "{\"text\": \"fine\"}\n\n{\"text\": \"cut\n");
  test::write_file(d + "/nokey.jsonl", "{\"body\": \"no text key\"}\n");
  test::write_file(d + "/number.jsonl", "{\"text\": 42}\n");
  ASSERT_EQ(::mkfifo((d + "/fifo").c_str(), 0600), 0);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {d + "/missing.txt", "missing.txt"},
      {d, "a directory"},
      {d + "/fifo", "a FIFO"},
      {d + "/broken.jsonl", d + "/broken.jsonl:3: not a JSON line"},
      {d + "/nokey.jsonl", d + "/nokey.jsonl:1: no key \"text\""},
      {d + "/number.jsonl", d + "/number.jsonl:1: \"text\" is number, not a string"},
      {d + "/bad.txt --invalid-utf8 error", d + "/bad.txt: ill-formed UTF-8 at byte 1"},
      {d + "/story.txt -o " + d + "/no/such/dir/x", "the directory " + d + "/no/such/dir does not exist"},
  };
  for (const auto& [args, message] : cases) {
    const std::string output_args = args.find(" -o ") == std::string::npos ? " -o " + d + "/bad-out/x" : "";
    fs::create_directories(d + "/bad-out");
    const CommandRun r = trident_data(args + output_args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << ": " << r.output;
    EXPECT_TRUE(fs::is_empty(d + "/bad-out")) << args << ": an output was written";
  }
}

}  // namespace
}  // namespace trident
