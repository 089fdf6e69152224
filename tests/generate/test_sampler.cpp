// TokenSampler: greedy, temperature, top-k and top-p against the distributions they define, computed
// here from the logits; the streams are reproducible and independent.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "core/error.hpp"
#include "generate/sampler.hpp"

namespace trident {
namespace {

// log(0.5), log(0.3), log(0.15), log(0.05): softmax gives back these probabilities.
const std::vector<float> kLogits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};

// Frequencies of n draws.
std::vector<double> frequencies(const SamplingOptions& o, int n, const std::vector<float>& logits = kLogits) {
  TokenSampler sampler(o, 0);
  std::vector<double> f(logits.size(), 0.0);
  for (int i = 0; i < n; ++i) f[size_t(sampler.next(logits.data(), int64_t(logits.size())))] += 1.0 / n;
  return f;
}

// Each frequency within 5 standard deviations of its probability (a false failure: < 1e-5 per draw set).
void expect_distribution(const std::vector<double>& f, const std::vector<double>& p, int n) {
  for (size_t i = 0; i < p.size(); ++i) {
    const double sigma = std::sqrt(std::max(p[i] * (1 - p[i]), 1e-12) / n);
    if (p[i] == 0) {
      EXPECT_EQ(f[i], 0.0) << "token " << i << " is outside the kept set";
    } else {
      EXPECT_NEAR(f[i], p[i], 5 * sigma) << "token " << i;
    }
  }
}

TEST(Sampler, GreedyTakesTheFirstLargestLogit) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f};
  for (const uint64_t seed : {0u, 1u, 99u}) {
    TokenSampler greedy({0.0, 0, 1.0, seed}, 0);
    EXPECT_EQ(greedy.next(logits.data(), 4), 1);
    TokenSampler top1({1.0, 1, 1.0, seed}, 3);  // top-k 1 leaves the argmax alone
    EXPECT_EQ(top1.next(logits.data(), 4), 1);
    TokenSampler tiny_p({1.0, 0, 1e-6, seed}, 5);  // as does a nucleus of the most likely token
    EXPECT_EQ(tiny_p.next(logits.data(), 4), 1);
  }
}

TEST(Sampler, TemperatureOneDrawsTheSoftmax) {
  const int n = 40000;
  expect_distribution(frequencies({1.0, 0, 1.0, 11}, n), {0.5, 0.3, 0.15, 0.05}, n);
}

TEST(Sampler, TemperatureSharpensAndFlattens) {
  // p_i^(1/T) normalised: T = 0.5 squares the probabilities, T = 2 takes their square roots.
  const int n = 40000;
  auto powered = [](double e) {
    std::vector<double> p = {0.5, 0.3, 0.15, 0.05};
    double sum = 0;
    for (double& x : p) sum += x = std::pow(x, e);
    for (double& x : p) x /= sum;
    return p;
  };
  expect_distribution(frequencies({0.5, 0, 1.0, 12}, n), powered(2.0), n);
  expect_distribution(frequencies({2.0, 0, 1.0, 13}, n), powered(0.5), n);
}

TEST(Sampler, TopKAndTopPRenormaliseOverTheKeptTokens) {
  const int n = 40000;
  expect_distribution(frequencies({1.0, 2, 1.0, 14}, n), {0.5 / 0.8, 0.3 / 0.8, 0, 0}, n);
  // The nucleus of 0.75: 0.5 does not reach it, 0.5 + 0.3 does.
  expect_distribution(frequencies({1.0, 0, 0.75, 15}, n), {0.5 / 0.8, 0.3 / 0.8, 0, 0}, n);
  // 0.9: three tokens (0.95); combined with top-k 2, the smaller set wins.
  expect_distribution(frequencies({1.0, 0, 0.9, 16}, n), {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}, n);
  expect_distribution(frequencies({1.0, 2, 0.9, 17}, n), {0.5 / 0.8, 0.3 / 0.8, 0, 0}, n);
}

TEST(Sampler, StreamsAreReproducibleAndIndependent) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = float(std::sin(double(i)));
  auto draws = [&](uint64_t seed, uint64_t stream) {
    TokenSampler s({1.0, 0, 1.0, seed}, stream);
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) out.push_back(s.next(logits.data(), 1000));
    return out;
  };
  EXPECT_EQ(draws(5, 0), draws(5, 0));
  EXPECT_NE(draws(5, 0), draws(5, 1));
  EXPECT_NE(draws(5, 0), draws(6, 0));
}

TEST(Sampler, OutOfRangeOptionsAreRefused) {
  EXPECT_THROW(check_sampling_options({-0.1, 0, 1.0, 0}), Error);
  EXPECT_THROW(check_sampling_options({1.0, -1, 1.0, 0}), Error);
  EXPECT_THROW(check_sampling_options({1.0, 0, 0.0, 0}), Error);
  EXPECT_THROW(check_sampling_options({1.0, 0, 1.5, 0}), Error);
  EXPECT_THROW(check_sampling_options({std::nan(""), 0, 1.0, 0}), Error);
  EXPECT_NO_THROW(check_sampling_options({0.0, 0, 1.0, 0}));
}

}  // namespace
}  // namespace trident
