#include "generate/generation.hpp"

#include <mpi.h>

#include "core/error.hpp"

namespace trident {

GenerationResult generate(Decoder& decoder, const GenerationRequest& request) {
  const int64_t B = decoder.batch(), P = int64_t(request.prompt.size());
  TRIDENT_CHECK(P >= 1, "generate: an empty prompt");
  TRIDENT_CHECK(positions_needed(request) <= decoder.max_len(),
                "generate: a prompt of {} tokens and {} new ones need {} positions; the decoder has {}", P,
                request.max_new_tokens, positions_needed(request), decoder.max_len());
  GenerationResult result;
  result.samples.resize(size_t(B));
  if (request.max_new_tokens == 0) return result;
  std::vector<TokenSampler> samplers;
  for (int64_t b = 0; b < B; ++b) samplers.emplace_back(request.sampling, uint64_t(b));
  decoder.reset();

  std::vector<int32_t> fed(size_t(B * P));
  for (int64_t b = 0; b < B; ++b) std::copy(request.prompt.begin(), request.prompt.end(), fed.begin() + b * P);
  double t0 = MPI_Wtime();
  std::vector<float> logits = decoder.feed(fed.data(), P);
  result.prompt_seconds = MPI_Wtime() - t0;
  t0 = MPI_Wtime();
  const int64_t V = int64_t(logits.size()) / B;
  std::vector<bool> done(size_t(B), false);
  fed.resize(size_t(B));
  for (int64_t i = 0; i < request.max_new_tokens; ++i) {
    int64_t running = 0;
    for (int64_t b = 0; b < B; ++b) {
      fed[b] = done[b] ? 0 : samplers[b].next(&logits[b * V], V);  // a finished sample's row is fed, not kept
      if (done[b]) continue;
      result.samples[b].push_back(fed[b]);
      done[b] = fed[b] == request.stop_token;
      running += !done[b];
    }
    if (running == 0 || i + 1 == request.max_new_tokens) break;
    logits = decoder.feed(fed.data(), 1);
    ++result.decoded_steps;
  }
  result.decode_seconds = MPI_Wtime() - t0;
  return result;
}

}  // namespace trident
