#pragma once
// The error of the checkpoint module, apart from its API so that the internal HDF5 and format
// helpers can throw it without including checkpoint.hpp.
#include "core/error.hpp"

namespace trident {

// A checkpoint that is missing, damaged, from a newer format, or does not fit the model. The message
// names the file and, where one is at fault, the dataset. Thrown on every rank alike by the
// collective functions (the verdict is agreed before throwing), so callers may catch it.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

}  // namespace trident
