#pragma once
// Errors: every failure the user can cause (bad deck, data, checkpoint, environment) is thrown as
// trident::Error with a message that names what was wrong and what is allowed. The top level logs it
// once and ends the whole MPI job (see core/fatal.hpp), so no rank is left waiting in a collective.
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace trident {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown for a feature that a deck may ask for but that is not built yet: never silent success.
class NotImplemented : public Error {
 public:
  using Error::Error;
};

[[noreturn]] inline void fail_at(const char* file, int line, const std::string& message) {
  throw Error(fmt::format("{} ({}:{})", message, file, line));
}

}  // namespace trident

// TRIDENT_CHECK(cond, "fmt", args...): throws trident::Error naming the source file and line.
#define TRIDENT_CHECK(cond, ...)                                                  \
  do {                                                                            \
    if (!(cond)) ::trident::fail_at(__FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
  } while (0)

#define TRIDENT_FAIL(...) ::trident::fail_at(__FILE__, __LINE__, fmt::format(__VA_ARGS__))
