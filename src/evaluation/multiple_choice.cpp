#include "evaluation/multiple_choice.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

#include "core/error.hpp"
#include "core/regular_file.hpp"

namespace trident {
namespace {

ChoiceExample parse_example(const std::string& line, int64_t number, text::TextCodec& codec) {
  const nlohmann::json j = nlohmann::json::parse(line);
  if (!j.is_object() || !j.contains("ctx") || !j["ctx"].is_string() || !j.contains("endings") ||
      !j["endings"].is_array() || j["endings"].empty() || !j.contains("label") || !j["label"].is_number_integer())
    throw Error("not an example: an object with \"ctx\" (text), \"endings\" (texts) and \"label\" (an integer)");
  ChoiceExample e;
  e.line = number;
  e.context = codec.encode(j["ctx"].get<std::string>());
  for (const auto& ending : j["endings"]) {
    if (!ending.is_string()) throw Error("\"endings\" must hold texts");
    e.endings.push_back(codec.encode(" " + ending.get<std::string>()));
  }
  e.label = j["label"].get<int64_t>();
  if (e.label < 0 || e.label >= int64_t(e.endings.size()))
    throw Error(fmt::format("\"label\" {} is not the index of one of the {} endings", e.label, e.endings.size()));
  if (e.context.empty()) throw Error("an empty \"ctx\"");
  return e;
}

}  // namespace

std::vector<ChoiceExample> read_hellaswag(const std::string& path, text::TextCodec& codec) {
  require_regular_file(path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot open '{}'", path));
  std::vector<ChoiceExample> examples;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      examples.push_back(parse_example(line, number, codec));
    } catch (const std::exception& e) {  // nlohmann's parse errors and ours
      throw Error(fmt::format("{}:{}: {}", path, number, e.what()));
    }
    if (examples.back().endings.size() != examples.front().endings.size())
      throw Error(fmt::format("{}:{}: {} endings; the first example has {}", path, number,
                              examples.back().endings.size(), examples.front().endings.size()));
  }
  if (in.bad()) throw Error(fmt::format("{}: read error", path));
  if (examples.empty()) throw Error(fmt::format("{}: no examples", path));
  return examples;
}

ChoiceScore score_example(Decoder& decoder, const ChoiceExample& e) {
  const int64_t B = int64_t(e.endings.size());
  TRIDENT_CHECK(decoder.batch() == B, "a decoder of {} rows for {} endings", decoder.batch(), B);
  int64_t longest = 0;
  for (const auto& ending : e.endings) longest = std::max(longest, int64_t(ending.size()));
  // Positions fed: context + ending - 1 (the last token is only a target).
  ChoiceScore score;
  const int64_t room = decoder.max_len() + 1 - longest;
  if (room < 1)
    throw Error(fmt::format("line {}: an ending of {} tokens does not fit the model's {} positions", e.line, longest,
                            decoder.max_len()));
  const int64_t ctx = std::min<int64_t>(int64_t(e.context.size()), room);
  score.context_tokens_dropped = int64_t(e.context.size()) - ctx;
  const int64_t n = ctx + longest - 1;
  std::vector<int32_t> tokens(size_t(B * n), 0), targets(size_t(B * n), -1);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int32_t> row(e.context.end() - ctx, e.context.end());
    row.insert(row.end(), e.endings[b].begin(), e.endings[b].end());
    for (int64_t p = 0; p + 1 < int64_t(row.size()); ++p) {
      tokens[b * n + p] = row[p];
      if (p + 1 >= ctx) targets[b * n + p] = row[p + 1];  // the ending's tokens are scored
    }
  }
  decoder.reset();
  const std::vector<float> losses = decoder.feed_losses(tokens.data(), n, targets.data());
  for (int64_t b = 0; b < B; ++b) {
    double sum = 0;
    for (int64_t p = 0; p < n; ++p) sum += losses[b * n + p];  // unscored positions are 0
    score.sum_loss.push_back(sum);
    score.mean_loss.push_back(sum / double(e.endings[b].size()));
  }
  score.prediction = std::min_element(score.mean_loss.begin(), score.mean_loss.end()) - score.mean_loss.begin();
  score.prediction_by_sum = std::min_element(score.sum_loss.begin(), score.sum_loss.end()) - score.sum_loss.begin();
  return score;
}

}  // namespace trident
