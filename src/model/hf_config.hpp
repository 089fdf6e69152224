#pragma once
// The Hugging Face config.json beside `model.init_from`'s weights, checked against the deck: the weights
// alone do not say the rotary base, the norm's epsilon, the key/value heads of a fused layout or the
// activation, and a mismatch there would train a different model without any error. transformers'
// GPT2LMHeadModel and LlamaForCausalLM keys are read (their defaults where a key is absent); rope
// scaling (Llama 3.1's long context) and other activations are refused as not supported.
#include <string>

#include "core/config.hpp"

namespace trident {

// The config.json of init_from (a directory's, or the one beside a file or index json); "" when there is
// none (weights without a config are taken as the deck describes them).
std::string hf_config_path(const std::string& init_from);

// Throws trident::Error naming the config file, each key that differs and the deck's value, or a key
// whose value trident does not support. Does nothing without a config.json.
void check_hf_config(const ModelConfig& m, const std::string& init_from);

}  // namespace trident
