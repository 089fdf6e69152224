#pragma once
// Small string helpers C++17's std::string lacks.
#include <string>
#include <string_view>

namespace trident {

inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace trident
