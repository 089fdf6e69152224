#include "model/bf16_working_copy.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace trident {

Bf16WorkingCopy::Bf16WorkingCopy(Kernels& kernels, std::vector<GptModel*> chunks)
    : k_(kernels), pool_(kernels, false) {
  chunks_.resize(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    Chunk& c = chunks_[i];
    c.model = chunks[i];
    TRIDENT_CHECK(c.model->params() == nullptr, "internal: a bf16 working copy for a chunk with fp32 parameters");
    c.patterns = k_.alloc_bf16(std::max<int64_t>(c.model->layout().total(), 1));
    c.source = std::make_unique<Source>(*this, int(i));
    c.model->set_parameter_source(c.source.get());
  }
}

Bf16WorkingCopy::~Bf16WorkingCopy() {
  for (auto& c : chunks_) k_.free(c.patterns);
}

const float* Bf16WorkingCopy::acquire(int c, int64_t begin, int64_t end) {
  Chunk& chunk = chunks_[size_t(c)];
  for (const auto& w : chunk.widened)
    TRIDENT_CHECK(w.begin != begin, "internal: parameters [{}, {}) acquired twice", begin, end);
  ParameterBufferPool::Buffer* buffer = pool_.take(end - begin);
  k_.unpack_bf16(buffer->data, chunk.patterns + begin, end - begin);
  chunk.widened.push_back(Widened{begin, buffer});
  return buffer->data;
}

void Bf16WorkingCopy::release(int c, int64_t begin, int64_t end) {
  Chunk& chunk = chunks_[size_t(c)];
  const auto it =
      std::find_if(chunk.widened.begin(), chunk.widened.end(), [&](const Widened& w) { return w.begin == begin; });
  TRIDENT_CHECK(it != chunk.widened.end(), "internal: releasing parameters [{}, {}) not acquired", begin, end);
  ParameterBufferPool::give_back(it->buffer);
  chunk.widened.erase(it);
}

void Bf16WorkingCopy::check_released() const {
  for (const auto& c : chunks_)
    for (const auto& w : c.widened)
      TRIDENT_CHECK(false, "internal: widened parameters from element {} still held at the end of a step", w.begin);
}

void Bf16WorkingCopy::widen(int c, float* out) {
  const Chunk& chunk = chunks_[size_t(c)];
  k_.unpack_bf16(out, chunk.patterns, chunk.model->layout().total());
}

void Bf16WorkingCopy::copy_to_host(int c, float* host) {
  const int64_t n = chunks_[size_t(c)].model->layout().total();
  float* widened = k_.alloc(std::max<int64_t>(n, 1));
  widen(c, widened);
  k_.copy_to_host(host, widened, n);
  k_.free(widened);
}

int64_t Bf16WorkingCopy::bytes() const {
  int64_t patterns = 0;
  for (const auto& c : chunks_) patterns += c.model->layout().total();
  return patterns * int64_t(sizeof(uint16_t)) + pool_.bytes();
}

}  // namespace trident
