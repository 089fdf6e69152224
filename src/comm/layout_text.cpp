#include "comm/layout_text.hpp"

#include <fmt/format.h>

#include <set>
#include <vector>

namespace trident {

std::string describe_groups(const MeshLayout& layout) {
  std::string text;
  auto groups = [&](const char* name, auto members) {
    std::set<std::vector<int>> seen;
    for (int r = 0; r < layout.world_size(); ++r) seen.insert(members(r));
    text += fmt::format("{} groups:", name);
    for (const auto& g : seen) text += fmt::format(" [{}]", fmt::join(g, " "));
    text += "\n";
  };
  groups("TP", [&](int r) { return layout.tp_group(r); });
  groups("PP", [&](int r) { return layout.pp_group(r); });
  groups("DP", [&](int r) { return layout.dp_group(r); });
  return text;
}

std::string describe_layout_preview(const MeshLayout& layout) {
  const int n = layout.world_size();
  std::string text = fmt::format(
      "layout preview for {} ranks (not launched: which node each rank runs on is the launcher's placement; "
      "`mpiexec -n {} trident topology` shows it); mesh tp {} x pp {} x dp {}\n rank    dp    pp    tp\n",
      n, n, layout.tp_size(), layout.pp_size(), layout.dp_size());
  for (int r = 0; r < n; ++r) {
    const Coord c = layout.coord_of(r);
    text += fmt::format("{:5d} {:5d} {:5d} {:5d}\n", r, c.dp, c.pp, c.tp);
  }
  return text + describe_groups(layout);
}

}  // namespace trident
