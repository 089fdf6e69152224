// `trident generate`: text from a trained model (a checkpoint, or Hugging Face weights via model.init_from),
// with a KV cache, on one rank or across the ranks of one tensor-parallel group.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <iostream>

#include "app/commands.hpp"
#include "app/inference_model.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/output_file.hpp"
#include "core/regular_file.hpp"
#include "generate/generation.hpp"
#include "text/text_codec.hpp"

namespace trident {
namespace {

std::vector<int32_t> prompt_tokens(const GenerateArgs& args, text::TextCodec& codec, int64_t vocab) {
  const int given = int(!args.prompt.empty()) + int(!args.prompt_file.empty()) + int(!args.prompt_ids.empty());
  if (given > 1) throw Error("give one of --prompt, --prompt-file and --prompt-ids");
  if (!args.prompt_ids.empty()) return text::parse_token_ids(args.prompt_ids, vocab, "--prompt-ids");
  std::string prompt = args.prompt;
  if (!args.prompt_file.empty()) {
    constexpr size_t kMaxPromptBytes = 16 << 20;
    try {
      prompt = read_small_file(args.prompt_file, kMaxPromptBytes);
    } catch (const Error& e) {
      throw Error(fmt::format("--prompt-file: {}", e.what()));
    }
  }
  if (!prompt.empty()) {
    try {
      return codec.encode(prompt);
    } catch (const Error& e) {
      throw Error(fmt::format("the prompt: {}", e.what()));
    }
  }
  if (const auto eot = codec.end_of_text()) return {*eot};  // unconditional samples start a document
  throw Error(fmt::format("data.tokenizer = \"{}\" has no end-of-text token to start from: give a prompt",
                          to_string(codec.tokenizer())));
}

}  // namespace

int run_generate(const GenerateArgs& args) {
  std::string checkpoint;
  const Config cfg = load_inference_deck(args, args.checkpoint, "generate from", &checkpoint);
  check_sampling_options(args.sampling);
  text::TextCodec codec(cfg.data.tokenizer);
  GenerationRequest request;
  request.prompt = prompt_tokens(args, codec, cfg.model.vocab_size);
  request.max_new_tokens = args.max_new_tokens;
  request.sampling = args.sampling;
  if (const auto eot = codec.end_of_text(); eot && !args.no_stop) request.stop_token = *eot;
  const int64_t positions = positions_needed(request);
  if (positions > cfg.model.seq_len)
    throw Error(fmt::format("the prompt ({} tokens) and --max-new-tokens {} need {} positions; the model has "
                            "seq_len = {} (learned position embeddings: it cannot see further)",
                            request.prompt.size(), request.max_new_tokens, positions, cfg.model.seq_len));

  log::info("trident generate {} (tp {}): {}", cfg.source, cfg.mesh.tp,
            checkpoint.empty() ? "model.init_from " + cfg.model.init_from : checkpoint);
  InferenceModel held(cfg);
  GptModel& model = held.model();
  Decoder decoder(model.shapes(), model.layout(), held.parameters(), held.kernels(), held.tp(), args.samples, positions);
  log::info("generate: {} sample(s) of up to {} tokens after a prompt of {} (temperature {}, top-k {}, top-p {}, "
            "seed {}); KV cache {:.1f} MiB per rank",
            args.samples, request.max_new_tokens, request.prompt.size(), args.sampling.temperature,
            args.sampling.top_k, args.sampling.top_p, args.sampling.seed, double(decoder.bytes()) / 1048576.0);
  const GenerationResult result = generate(decoder, request);
  int64_t generated = 0;
  for (const auto& s : result.samples) generated += int64_t(s.size());
  log::info("generate: prompt in {:.3f} s; {} tokens in {:.3f} s ({:.1f} tokens/s over {} sample(s))",
            result.prompt_seconds, generated, result.decode_seconds,
            result.decode_seconds > 0 ? double(result.decoded_steps * args.samples) / result.decode_seconds : 0.0,
            args.samples);

  if (!log::is_root()) return 0;
  const std::string prompt_text = codec.decode(request.prompt);
  nlohmann::json samples = nlohmann::json::array();
  for (size_t i = 0; i < result.samples.size(); ++i) {
    const std::string text = codec.decode(result.samples[i]);
    std::cout << fmt::format("--- sample {} of {} ({} tokens) ---\n{}{}\n", i + 1, result.samples.size(),
                             result.samples[i].size(), prompt_text, text)
              << std::flush;
    samples.push_back({{"text", text}, {"tokens", result.samples[i]}});
  }
  if (!args.json.empty()) {
    const nlohmann::json out = {{"checkpoint", checkpoint},
                                {"prompt", prompt_text},
                                {"prompt_tokens", request.prompt},
                                {"temperature", args.sampling.temperature},
                                {"top_k", args.sampling.top_k},
                                {"top_p", args.sampling.top_p},
                                {"seed", args.sampling.seed},
                                {"samples", samples},
                                {"seconds", result.prompt_seconds + result.decode_seconds}};
    write_file_atomically("generated samples", args.json, out.dump(2) + "\n");
  }
  return 0;
}

}  // namespace trident
