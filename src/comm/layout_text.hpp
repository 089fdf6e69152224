#pragma once
// The text of a rank layout shared by `trident topology` on a launched job (comm/mesh.hpp) and its
// preview for a rank count not launched (`trident topology --ranks N`).
#include <string>

#include "comm/topology.hpp"

namespace trident {

// "TP groups: [0 1] [2 3]\nPP groups: ...\nDP groups: ...\n": every group once, by its members.
std::string describe_groups(const MeshLayout& layout);

// The layout of a launch on layout.world_size() ranks without launching it: each rank's (dp, pp, tp)
// and every group; nodes and hosts are the launcher's to decide, so they are not shown.
std::string describe_layout_preview(const MeshLayout& layout);

}  // namespace trident
