#pragma once
// Reading an input deck: TOML file + `--set section.key=value` overrides -> validated Config.
// Every error names where the value came from (file:line:column, or the --set argument), the key,
// the value and what is allowed. Unknown sections and keys are errors, with a "did you mean" hint.
#include <string>
#include <vector>

#include "core/config.hpp"

namespace trident {

struct DeckOptions {
  int world_size = 0;  // > 0: mesh.tp*pp*dp must equal it (train, topology); 0: not checked (check, plan)
};

// Reads and validates a deck file. Throws trident::Error.
Config load_deck(const std::string& path, const std::vector<std::string>& overrides = {},
                 const DeckOptions& options = {});

// The same for deck text held in memory; `source_name` stands for the file name in messages.
Config parse_deck(const std::string& text, const std::string& source_name,
                  const std::vector<std::string>& overrides = {}, const DeckOptions& options = {});

// Non-fatal findings of the last validation are in Config::warnings (e.g. a TP group wider than a node
// is decided later, by the topology). Markdown reference of every key (input/README.md is this text).
std::string deck_reference_markdown();

}  // namespace trident
