#include "deck/toml_text.hpp"

#include <algorithm>
#include <numeric>

namespace trident {

const char* toml_type_name(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string: return "string";
    case toml::node_type::integer: return "integer";
    case toml::node_type::floating_point: return "float";
    case toml::node_type::boolean: return "boolean";
    case toml::node_type::array: return "array";
    case toml::node_type::table: return "table";
    default: return "date/time";
  }
}

namespace {
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  std::iota(prev.begin(), prev.end(), 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}
}  // namespace

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates, bool prefixes) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    const bool prefix = prefixes && word.size() >= 3 && (c.rfind(word, 0) == 0 || word.rfind(c, 0) == 0);
    const size_t d = prefix ? 1 : edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  return best;
}

}  // namespace trident
