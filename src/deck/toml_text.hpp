#pragma once
// Small helpers shared by the TOML readers (the input deck and `trident plan`'s cluster files).
#include <toml++/toml.h>

#include <string>
#include <vector>

namespace trident {

// "string", "integer", "float", "boolean", "array", "table" or "date/time".
const char* toml_type_name(const toml::node& n);

// The candidate closest to `word` by edit distance, when close enough to be a typo (at most a third
// of the word's length, and at least 2, edits); with `prefixes`, a candidate that starts with the word
// (or the reverse, for words of 3+ letters) also counts as close. "" when none is.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates, bool prefixes = false);

}  // namespace trident
