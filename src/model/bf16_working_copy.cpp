#include "model/bf16_working_copy.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace trident {

Bf16WorkingCopy::Bf16WorkingCopy(Kernels& kernels, std::vector<GptModel*> chunks)
    : k_(kernels), pool_(kernels, false) {
  chunks_.reserve(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    Chunk& c = chunks_.emplace_back(chunks[i]);
    TRIDENT_CHECK(c.model->params() == nullptr, "internal: a bf16 working copy for a chunk with fp32 parameters");
    c.patterns = k_.alloc_bf16(std::max<int64_t>(c.model->layout().total(), 1));
    c.fp32 = k_.alloc(std::max<int64_t>(c.fp32_tensors.size(), 1));
    c.source = std::make_unique<Source>(*this, int(i));
    c.model->set_parameter_source(c.source.get());
  }
}

Bf16WorkingCopy::~Bf16WorkingCopy() {
  for (auto& c : chunks_) {
    k_.free(c.patterns);
    k_.free(c.fp32);
  }
}

const float* Bf16WorkingCopy::acquire(int c, int64_t begin, int64_t end) {
  Chunk& chunk = chunks_[size_t(c)];
  for (const auto& w : chunk.widened)
    TRIDENT_CHECK(w.begin != begin, "internal: parameters [{}, {}) acquired twice", begin, end);
  ParameterBufferPool::Buffer* buffer = pool_.take(end - begin);
  widen_range(chunk, begin, end, buffer->data);
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

void Bf16WorkingCopy::widen_range(const Chunk& chunk, int64_t begin, int64_t end, float* out) {
  chunk.fp32_tensors.split(begin, end, [&](int64_t a, int64_t b, bool fp32) {
    if (fp32)
      k_.copy(out + (a - begin), chunk.fp32 + chunk.fp32_tensors.packed_offset(a), b - a);
    else
      k_.unpack_bf16(out + (a - begin), chunk.patterns + a, b - a);
  });
}

void Bf16WorkingCopy::widen(int c, float* out) {
  const Chunk& chunk = chunks_[size_t(c)];
  widen_range(chunk, 0, chunk.model->layout().total(), out);
}

void Bf16WorkingCopy::copy_to_host(int c, float* host) {
  const int64_t n = chunks_[size_t(c)].model->layout().total();
  float* widened = k_.alloc(std::max<int64_t>(n, 1));
  widen(c, widened);
  k_.copy_to_host(host, widened, n);
  k_.free(widened);
}

int64_t Bf16WorkingCopy::bytes() const {
  int64_t patterns = 0, fp32 = 0;
  for (const auto& c : chunks_) {
    patterns += c.model->layout().total();
    fp32 += c.fp32_tensors.size();
  }
  return patterns * int64_t(sizeof(uint16_t)) + fp32 * int64_t(sizeof(float)) + pool_.bytes();
}

}  // namespace trident
