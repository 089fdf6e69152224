#pragma once
// Running an independent PyTorch reference script (gpt2_reference.py, llama_reference.py) from a test:
// Debian's interpreter, where python3-torch installs torch (TRIDENT_REFERENCE_PYTHON overrides it), and
// the JSON summary every subcommand prints as its last line of output.
#include <fmt/format.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "common/test_support.hpp"

namespace trident::test {

inline const std::string& reference_python() {
  static const std::string python =
      std::getenv("TRIDENT_REFERENCE_PYTHON") ? std::getenv("TRIDENT_REFERENCE_PYTHON") : "/usr/bin/python3";
  return python;
}

// `s` as one single-quoted shell word.
inline std::string shell_quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `script args` with reference_python(); returns the JSON of its last output line. Throws with the
// command and its output when it fails.
inline nlohmann::json run_reference_script(const std::string& script, const std::string& args) {
  std::string out;
  const std::string cmd = shell_quoted(reference_python()) + " " + shell_quoted(script) + " " + args;
  const int rc = run_command(cmd, &out);
  if (rc != 0) throw std::runtime_error(fmt::format("`{}` failed ({}):\n{}", cmd, rc, out));
  const auto end = out.find_last_not_of("\n ");
  const auto begin = out.rfind('\n', end);
  return nlohmann::json::parse(out.substr(begin == std::string::npos ? 0 : begin + 1, end - begin));
}

}  // namespace trident::test
