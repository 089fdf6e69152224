// runtime.trace: the Chrome trace of a pipelined `trident train` parses, holds one process per rank,
// and each stage's forward/backward events follow the schedule, written out here by hand from the
// schedules' definitions (not taken from build_schedule), with every boundary send and receive
// inside the operation it belongs to.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include "train/train_run_util.hpp"

namespace trident::test {
namespace {

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> w;
  for (std::string x; in >> x;) w.push_back(x);
  return w;
}

struct Event {
  std::string name, category;
  double ts = 0, dur = 0;
};

// The complete ("X") events of each process (= rank), in time order.
std::map<int, std::vector<Event>> events_by_rank(const nlohmann::json& trace) {
  std::map<int, std::vector<Event>> out;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "X")
      out[e.at("pid").get<int>()].push_back({e.at("name").get<std::string>(), e.at("cat").get<std::string>(),
                                             e.at("ts").get<double>(), e.at("dur").get<double>()});
  for (auto& [rank, events] : out)
    std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.ts < b.ts; });
  return out;
}

bool is_boundary_event(const Event& e) { return e.name.rfind("send ", 0) == 0 || e.name.rfind("recv ", 0) == 0; }

// pp 2, 4 micro-batches (global batch 8 of micro-batches of 2), 2 steps. Stage 0 sends every
// forward's output and receives every backward's input gradient; stage 1 the other way round.
void expect_trace_follows(const std::string& schedule, const std::vector<std::string>& stage_ops) {
  const TrainOutput run = run_train(2, kTinyTextDeck, {"mesh.pp=2", "mesh.schedule=" + schedule, "train.steps=2",
                                                       "train.global_batch=8", "runtime.trace=trace.json"});
  ASSERT_EQ(run.rc, 0) << run.out;
  std::ifstream f(run.dir + "/trace.json");
  ASSERT_TRUE(f.good()) << "no trace written\n" << run.out;
  const nlohmann::json trace = nlohmann::json::parse(f);  // throws (fails the test) if it does not parse
  const auto ranks = events_by_rank(trace);
  ASSERT_EQ(ranks.size(), 2u);
  for (int stage = 0; stage < 2; ++stage) {
    SCOPED_TRACE(fmt::format("{}, stage {}", schedule, stage));
    const std::vector<std::string> expected_ops = words(stage_ops[size_t(stage)] + " " + stage_ops[size_t(stage)]);
    std::vector<Event> ops, comms;
    for (const auto& e : ranks.at(stage)) (is_boundary_event(e) ? comms : ops).push_back(e);
    std::vector<std::string> op_names;
    for (const auto& e : ops) op_names.push_back(e.name);
    ASSERT_EQ(op_names, expected_ops);
    // Each operation holds exactly one boundary event, its own, inside its interval.
    ASSERT_EQ(comms.size(), ops.size());
    for (size_t i = 0; i < ops.size(); ++i) {
      const bool forward = ops[i].name[0] == 'F';
      const std::string kind = (stage == 0) == forward ? "send " : "recv ";
      EXPECT_EQ(comms[i].name, kind + ops[i].name) << "event " << i;
      EXPECT_EQ(comms[i].category, kind.substr(0, 4));
      EXPECT_EQ(ops[i].category, forward ? "forward" : "backward");
      EXPECT_GE(comms[i].ts, ops[i].ts) << comms[i].name;
      EXPECT_LE(comms[i].ts + comms[i].dur, ops[i].ts + ops[i].dur + 1e-3) << comms[i].name;
    }
  }
  // Process names say which rank and coordinates each timeline is.
  int named = 0;
  for (const auto& e : trace.at("traceEvents"))
    if (e.at("ph") == "M") {
      const int pid = e.at("pid").get<int>();
      EXPECT_EQ(e.at("args").at("name"), fmt::format("rank {} (dp 0, pp {}, tp 0)", pid, pid));
      ++named;
    }
  EXPECT_EQ(named, 2);
}

TEST(Trace, GPipeStagesRunAllForwardsThenAllBackwards) {
  expect_trace_follows("gpipe", {"F0.0 F0.1 F0.2 F0.3 B0.0 B0.1 B0.2 B0.3", "F0.0 F0.1 F0.2 F0.3 B0.0 B0.1 B0.2 B0.3"});
}

TEST(Trace, OneFOneBStagesWarmUpThenAlternate) {
  // Stage s warms up with pp - s - 1 = 1 (stage 0) or 0 (stage 1) extra forwards.
  expect_trace_follows("1f1b", {"F0.0 F0.1 B0.0 F0.2 B0.1 F0.3 B0.2 B0.3", "F0.0 B0.0 F0.1 B0.1 F0.2 B0.2 F0.3 B0.3"});
}

}  // namespace
}  // namespace trident::test
