#pragma once
// `trident plan DECK --cluster CLUSTER` and the memory block of `trident check DECK`.
#include <functional>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "planner/cluster.hpp"
#include "planner/search.hpp"

namespace CLI {
class App;
}

namespace trident::planner {

using DeckLoader = std::function<Config(const std::string& deck, const std::vector<std::string>& overrides)>;

// Registers the `plan` subcommand on `app` (DECK positional, --cluster, --top N, --json, --explain,
// pins --tp --pp --dp --micro-batch --zero --recompute --schedule --virtual-stages --sequence-parallel
// --nodes, repeated --set KEY=VALUE passed to load_deck) and runs it in the subcommand's callback:
// the report goes to stdout on world rank 0; errors are thrown as trident::Error.
void add_plan_command(CLI::App& app, DeckLoader load_deck);

// The text block `trident check` prints: the memory estimate per device of the deck's own layout,
// itemised, with a "warning:" line when it does not fit. `cluster` empty = default_cluster_for(cfg),
// and the block says which cluster it assumed and why.
std::string check_memory_report(const Config& cfg, const std::string& cluster = "");

// "cpu" when runtime.backend is cpu, "h100-80g" when it is cuda.
std::string default_cluster_for(const Config& cfg);

struct PlanOptions {
  std::string cluster;  // preset or file; empty = default_cluster_for(cfg)
  int top = 10;
  bool json = false;
  bool explain = false;
  SearchPins pins;
};

// What `trident plan` prints for a loaded deck (the table, the --explain text or the --json array).
std::string plan_report(const Config& cfg, const PlanOptions& options);

// Pieces of the report.
// Rows numbered from first_rank; 0 numbers them "-" (a layout outside the ranking).
std::string format_table(const std::vector<LayoutEstimate>& rows, size_t first_rank = 1);
std::string explain_estimate(const Config& cfg, const ClusterSpec& cluster, const LayoutEstimate& e);

}  // namespace trident::planner
