// The KV-cache decoder (generate/decoder.hpp) against the training model's forward, on the Trainer's
// layout: the TP group is the whole world (registered at 1 and 2 ranks; at 2 also on gpu-sim over NCCL).
//
// Two sequences are fed as generation feeds them (a prompt of 5 tokens at once, then one token per call)
// and the log-softmax of every position's logits, taken here in double, is summed against the next
// tokens: the training forward's loss sum over the same tokens (GptModel::forward_loss, its flash
// attention over whole sequences and its vocab-parallel cross-entropy) must agree within 1e-5 relative
// (float32 sums of 32 positions' losses ~4 each; the paths differ only in the order of float sums).
// The decoder's per-position losses (feed_losses, for scoring) equal those of its logits alike.
// At tp 2 the logits also equal the serial decoder's within 1e-5 (the TP tolerance of the logits: two
// partial sums of 32 terms, |logit| < 5).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "common/model_inputs.hpp"
#include "common/test_support.hpp"
#include "core/error.hpp"
#include "generate/decoder.hpp"
#include "kernels.hpp"
#include "parallel/parallel_test_util.hpp"

namespace trident::test {
namespace {

constexpr int64_t kVocab = 1009, kPrompt = 5;

// A Llama-shaped model: RoPE on the cached keys, one key/value head (replicated over a TP group), SwiGLU.
const std::vector<std::string> kLlama = {"model.architecture=llama", "model.kv_heads=1", "model.ffn_hidden=96",
                                         "model.rope_theta=300"};

Config decoder_deck(int tp, std::vector<std::string> model = {}) {
  model.insert(model.end(), {fmt::format("mesh.tp={}", tp), "mesh.dp=1", "train.micro_batch=2",
                             "train.global_batch=2", "model.vocab_pad_to=8"});
  return small_deck(kVocab, model);
}

// The seeded model of decoder_deck on a TP group of the whole world.
struct ModelOnTheWorld {
  explicit ModelOnTheWorld(const std::vector<std::string>& model = {})
      : cfg(decoder_deck(world_size(), model)), mesh(MPI_COMM_WORLD, cfg.mesh, cfg.runtime.mpi_wait) {
    connect(mesh, cfg);
    trainer = std::make_unique<Trainer>(cfg, test_kernels(), &mesh);
  }
  Config cfg;
  ParallelMesh mesh;
  std::unique_ptr<Trainer> trainer;
  GptModel& model() { return trainer->model(); }
  Group* tp() { return world_size() > 1 ? &mesh.tp() : nullptr; }
};

// -log softmax(row)[target], in double.
double position_loss(const float* row, int32_t target) {
  const double top = *std::max_element(row, row + kVocab);
  double sum = 0;
  for (int64_t v = 0; v < kVocab; ++v) sum += std::exp(double(row[v]) - top);
  return std::log(sum) + top - double(row[target]);
}

// Every position's logits [B, T, V] as generation computes them: the prompt at once, then one token a call.
std::vector<float> decode_positions(Decoder& d, const std::vector<int32_t>& tokens, int64_t B, int64_t T) {
  std::vector<float> out(size_t(B * T * kVocab));
  std::vector<int32_t> feed(size_t(B * kPrompt));
  for (int64_t b = 0; b < B; ++b) std::copy_n(&tokens[b * T], kPrompt, &feed[b * kPrompt]);
  const std::vector<float> prompt = d.feed(feed.data(), kPrompt, true);
  for (int64_t b = 0; b < B; ++b)
    std::copy_n(&prompt[b * kPrompt * kVocab], kPrompt * kVocab, &out[b * T * kVocab]);
  for (int64_t t = kPrompt; t < T; ++t) {
    int32_t next[2];
    for (int64_t b = 0; b < B; ++b) next[b] = tokens[b * T + t];
    const std::vector<float> last = d.feed(next, 1);
    for (int64_t b = 0; b < B; ++b) std::copy_n(&last[b * kVocab], kVocab, &out[(b * T + t) * kVocab]);
  }
  return out;
}

void check_cache_gives_training_loss(const std::vector<std::string>& model_keys) {
  ModelOnTheWorld held(model_keys);
  GptModel& model = held.model();
  const int64_t B = held.cfg.train.micro_batch, T = held.cfg.model.seq_len;
  const std::vector<int32_t> tokens = random_tokens(B * T + 1, kVocab, 21);
  const std::vector<int32_t> inputs(tokens.begin(), tokens.end() - 1), targets(tokens.begin() + 1, tokens.end());
  Decoder decoder(model.shapes(), model.layout(), model.params(), test_kernels(), held.tp(), B, T);
  const std::vector<float> logits = decode_positions(decoder, inputs, B, T);
  double loss = 0;
  for (int64_t i = 0; i < B * T; ++i) loss += position_loss(&logits[i * kVocab], targets[i]);
  const double want = model.forward_loss(inputs.data(), targets.data());
  EXPECT_NEAR(loss, want, 1e-5 * want) << "decoder " << loss << ", training forward " << want;
  EXPECT_EQ(decoder.length(), T);
  EXPECT_THROW(decoder.feed(inputs.data(), 1), Error) << "a full cache takes no more tokens";

  // Scoring (multiple choice): the per-position losses where the logits are, vocab-parallel; targets < 0
  // are not scored. Every third position unscored here: the rest must sum to the log-softmax's losses.
  decoder.reset();
  std::vector<int32_t> scored = targets;
  double want_scored = 0;
  for (int64_t i = 0; i < B * T; ++i) {
    if (i % 3 == 0)
      scored[i] = -1;
    else
      want_scored += position_loss(&logits[i * kVocab], targets[i]);
  }
  const std::vector<float> losses = decoder.feed_losses(inputs.data(), T, scored.data());
  double got_scored = 0;
  for (int64_t i = 0; i < B * T; ++i) {
    if (i % 3 == 0) {
      EXPECT_EQ(losses[i], 0.0f) << "position " << i << " is not scored";
    }
    got_scored += losses[i];
  }
  EXPECT_NEAR(got_scored, want_scored, 1e-5 * want_scored);

  if (world_size() == 1) return;
  const Config serial_cfg = decoder_deck(1, model_keys);
  Trainer serial(serial_cfg, test_kernels());
  GptModel& whole = serial.model();
  Decoder serial_decoder(whole.shapes(), whole.layout(), whole.params(), test_kernels(), nullptr, B, T);
  const std::vector<float> want_logits = decode_positions(serial_decoder, inputs, B, T);
  double worst = 0;
  for (size_t i = 0; i < logits.size(); ++i) worst = std::max(worst, double(std::abs(logits[i] - want_logits[i])));
  EXPECT_LE(worst, 1e-5) << "tp " << world_size() << " against the serial decoder";
}

TEST(Decoder, CacheGivesTheTrainingForwardsLoss) { check_cache_gives_training_loss({}); }
TEST(Decoder, CacheGivesTheTrainingForwardsLossLlama) { check_cache_gives_training_loss(kLlama); }

TEST(Decoder, RefusesWhatItCannotHold) {
  ModelOnTheWorld held;
  GptModel& model = held.model();
  Group* tp = held.tp();
  EXPECT_THROW(Decoder(model.shapes(), model.layout(), model.params(), test_kernels(), tp, 1, held.cfg.model.seq_len + 1),
               Error);
  EXPECT_THROW(Decoder(model.shapes(), model.layout(), nullptr, test_kernels(), tp, 1, 4), Error);
  Decoder decoder(model.shapes(), model.layout(), model.params(), test_kernels(), tp, 1, 4);
  const std::vector<int32_t> five(5, 1);
  EXPECT_THROW(decoder.feed(five.data(), 5), Error);
}

}  // namespace
}  // namespace trident::test
