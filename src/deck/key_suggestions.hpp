#pragma once
// "Did you mean" for a deck key that does not exist: a typo of a key of the same section, a key written
// in the wrong section, or the name another training tool gives a setting (nanoGPT, llm.c, Megatron-LM,
// DeepSpeed, Hugging Face: learning_rate, n_layer, max_iters, tensor_model_parallel_size, ...).
#include <map>
#include <string>

namespace trident::deck {

// The key the user most likely meant, as "'key'" (same section) or "[section] key" (another one);
// "" when nothing is close.
std::string suggest_key(const std::string& section, const std::string& key);

// Other tools' names for trident's keys: name (lower case, '_' for '-') -> "section.key".
const std::map<std::string, std::string>& other_tools_key_names();

}  // namespace trident::deck
