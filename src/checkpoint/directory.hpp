#pragma once
// The checkpoints of a directory by what they hold (internal): resume and pruning both order them
// by the step recorded inside (the manifest's), never by the file name alone, so that a stray copy
// (step_99999999.h5 holding step 2) is neither resumed nor a reason to delete newer checkpoints.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace trident::ckpt {

struct StoredCheckpoint {
  std::string path;
  int64_t name_step = 0;                // the N of step_N.h5
  std::optional<int64_t> content_step;  // the step its manifest records; none: no valid manifest
  // A file whose content is another step than its name says (a renamed or stray copy).
  bool stray() const { return content_step && *content_step != name_step; }
};

// The step_N.h5 files of dir (not .tmp), newest name first (serial; reads only their manifests).
std::vector<StoredCheckpoint> scan_checkpoints(const std::string& dir);

// "DIR/step_N.h5 is named step N but holds step M (a renamed or stray copy)"
std::string stray_reason(const StoredCheckpoint& c);

}  // namespace trident::ckpt
