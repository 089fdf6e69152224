#pragma once
// Shared helpers of the comm tests: an independent model of the rank layout (written from the
// definition of mesh.order, not from MeshLayout's strides), mesh enumeration and small utilities.
#include <array>
#include <cstdlib>
#include <ostream>
#include <string>
#include <vector>

#include "comm/topology.hpp"
#include "core/config.hpp"

namespace trident {
inline void PrintTo(const Coord& c, std::ostream* os) { *os << "(dp " << c.dp << ", pp " << c.pp << ", tp " << c.tp << ")"; }
}  // namespace trident

namespace trident::test {

inline const std::array<const char*, 6>& all_orders() {
  static const std::array<const char*, 6> orders = {"tp-dp-pp", "tp-pp-dp", "dp-tp-pp",
                                                    "dp-pp-tp", "pp-tp-dp", "pp-dp-tp"};
  return orders;
}

inline MeshConfig mesh_config(int tp, int pp, int dp, const std::string& order, bool strict = false) {
  MeshConfig m;
  m.tp = tp;
  m.pp = pp;
  m.dp = dp;
  m.order = order;
  m.strict_placement = strict;
  return m;
}

struct Factors {
  int tp, pp, dp;
};

// Every ordered (tp, pp, dp) with tp*pp*dp == n.
inline std::vector<Factors> factorisations(int n) {
  std::vector<Factors> out;
  for (int tp = 1; tp <= n; ++tp) {
    if (n % tp) continue;
    for (int pp = 1; pp <= n / tp; ++pp) {
      if ((n / tp) % pp) continue;
      out.push_back({tp, pp, n / tp / pp});
    }
  }
  return out;
}

// Reference decoding of a world rank: the order's first axis varies fastest, the last slowest
// (a mixed-radix number with digits in the order's axis sequence).
struct RefLayout {
  int tp, pp, dp;
  std::string order;

  int size_of(const std::string& axis) const { return axis == "tp" ? tp : axis == "pp" ? pp : dp; }
  Coord coord(int rank) const {
    Coord c;
    int rest = rank;
    for (int i = 0; i < 3; ++i) {
      const std::string axis = order.substr(3 * i, 2);
      const int digit = rest % size_of(axis);
      rest /= size_of(axis);
      (axis == "tp" ? c.tp : axis == "pp" ? c.pp : c.dp) = digit;
    }
    return c;
  }
  int world() const { return tp * pp * dp; }
  // Members of rank's group along `axis` ("tp", "pp" or "dp"), found by scanning every rank for those
  // that share the other two coordinates, ordered by their coordinate along the axis.
  std::vector<int> group(int rank, const std::string& axis) const {
    const Coord me = coord(rank);
    std::vector<int> members(size_of(axis), -1);
    for (int r = 0; r < world(); ++r) {
      const Coord c = coord(r);
      if (axis == "tp" && c.dp == me.dp && c.pp == me.pp) members[c.tp] = r;
      if (axis == "pp" && c.dp == me.dp && c.tp == me.tp) members[c.pp] = r;
      if (axis == "dp" && c.pp == me.pp && c.tp == me.tp) members[c.dp] = r;
    }
    return members;
  }
};

inline std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

}  // namespace trident::test
