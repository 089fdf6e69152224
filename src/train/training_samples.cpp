#include "train/training_samples.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/splitmix64.hpp"
#include "generate/generation.hpp"

namespace trident {
namespace {

std::vector<int32_t> sample_prompt(const TrainConfig& t, text::TextCodec& codec) {
  if (!t.sample_prompt.empty()) return codec.encode(t.sample_prompt);
  if (const auto eot = codec.end_of_text()) return {*eot};
  return {codec.tokenizer() == Tokenizer::Bytes ? int32_t('\n') : 0};
}

}  // namespace

TrainingSamples::TrainingSamples(const Config& cfg, Kernels& kernels, ParallelMesh* mesh)
    : k_(kernels),
      tp_(mesh && cfg.mesh.tp > 1 ? &mesh->tp() : nullptr),
      every_(cfg.train.sample_every),
      tokens_(cfg.train.sample_tokens),
      seed_(cfg.model.seed),
      codec_(cfg.data.tokenizer),
      prompt_text_(cfg.train.sample_prompt) {
  if (every_ == 0) return;
  try {
    prompt_ = sample_prompt(cfg.train, codec_);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: [train] sample_prompt: {}", cfg.source, e.what()));
  }
  const int64_t room = cfg.model.seq_len - int64_t(prompt_.size()) + 1;
  if (room < 1)
    throw Error(fmt::format("{}: [train] sample_prompt is {} tokens; the model sees {} ([model] seq_len)", cfg.source,
                            prompt_.size(), cfg.model.seq_len));
  if (tokens_ > room) {
    log::warn("[train] sample_tokens = {}: samples stop at {} tokens, where the prompt of {} fills seq_len = {}",
              tokens_, room, prompt_.size(), cfg.model.seq_len);
    tokens_ = room;
  }
}

std::string TrainingSamples::sample(const GptModel& model, const float* params, const std::vector<float>& host_params,
                                    int64_t step) {
  float* staged = nullptr;
  if (!params) {
    staged = k_.alloc(int64_t(host_params.size()));
    k_.copy_to_device(staged, host_params.data(), int64_t(host_params.size()));
    params = staged;
  }
  GenerationRequest request;
  request.prompt = prompt_;
  request.max_new_tokens = tokens_;
  request.sampling = SamplingOptions{1.0, 0, 1.0, splitmix64(seed_) ^ uint64_t(step)};
  if (const auto eot = codec_.end_of_text()) request.stop_token = *eot;  // a sample is one document
  std::vector<int32_t> tokens;
  {
    Decoder decoder(model.shapes(), model.layout(), params, k_, tp_, 1, positions_needed(request));
    tokens = generate(decoder, request).samples.at(0);
  }
  if (staged) k_.free(staged);
  return prompt_text_ + codec_.decode(tokens);
}

}  // namespace trident
