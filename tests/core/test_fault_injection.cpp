// The fault-injection facility (core/fault_injection.hpp): what TRIDENT_INJECT_FAULT arms, and that
// a misspelt point is refused instead of silently arming nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/error.hpp"
#include "core/fault_injection.hpp"

namespace {

using ::testing::HasSubstr;
namespace fault = trident::fault;

class FaultInjection : public ::testing::Test {
 protected:
  void TearDown() override { ::unsetenv("TRIDENT_INJECT_FAULT"); }
  static void set(const char* spec) { ::setenv("TRIDENT_INJECT_FAULT", spec, 1); }
  static std::string refusal(const char* spec) {
    set(spec);
    try {
      fault::check_environment();
    } catch (const trident::Error& e) {
      return e.what();
    }
    return "(accepted)";
  }
};

TEST_F(FaultInjection, NothingIsArmedWithoutTheVariable) {
  ::unsetenv("TRIDENT_INJECT_FAULT");
  EXPECT_NO_THROW(fault::check_environment());
  EXPECT_FALSE(fault::armed(fault::kPipelineStage));
  EXPECT_FALSE(fault::armed(fault::kCheckpointCrash));
}

TEST_F(FaultInjection, ArmsEachNamedPointWithItsArgument) {
  set("pipeline-stage:3,checkpoint-crash:before_latest");
  EXPECT_NO_THROW(fault::check_environment());
  EXPECT_EQ(fault::armed(fault::kPipelineStage), std::optional<std::string>("3"));
  EXPECT_EQ(fault::armed(fault::kCheckpointCrash), std::optional<std::string>("before_latest"));
  set("checkpoint-stall:before_rename");
  EXPECT_EQ(fault::armed(fault::kCheckpointStall), std::optional<std::string>("before_rename"));
  set("checkpoint-crash:before_rename");
  EXPECT_FALSE(fault::armed(fault::kPipelineStage));
  EXPECT_EQ(fault::armed(fault::kCheckpointCrash), std::optional<std::string>("before_rename"));
}

TEST_F(FaultInjection, RefusesAnUnknownPointAndNamesTheKnownOnes) {
  const std::string message = refusal("pipeline-stag:1");
  EXPECT_THAT(message, HasSubstr("'pipeline-stag' is not a fault injection point"));
  EXPECT_THAT(message, HasSubstr("pipeline-stage"));
  EXPECT_THAT(message, HasSubstr("checkpoint-crash"));
  EXPECT_THAT(message, HasSubstr("checkpoint-stall"));
  EXPECT_THAT(message, HasSubstr("slow-step"));
  EXPECT_THAT(refusal("pipeline-stage:1,bogus:2"), HasSubstr("'bogus' is not a fault injection point"));
}

TEST_F(FaultInjection, RefusesAPointWithoutItsArgument) {
  EXPECT_THAT(refusal("pipeline-stage"), HasSubstr("'pipeline-stage' needs an argument"));
  EXPECT_THAT(refusal("checkpoint-crash:"), HasSubstr("'checkpoint-crash' needs an argument"));
}

TEST_F(FaultInjection, ReadsANumericArgumentAndRefusesAnythingElse) {
  set("slow-step:40,pipeline-stage:0");
  EXPECT_EQ(fault::armed_number(fault::kSlowStep), std::optional<int>(40));
  EXPECT_EQ(fault::armed_number(fault::kPipelineStage), std::optional<int>(0));
  EXPECT_FALSE(fault::armed_number(fault::kCheckpointStall));
  for (const char* spec : {"slow-step:40ms", "slow-step:-1", "slow-step:x", "slow-step:99999999999"}) {
    set(spec);
    try {
      fault::armed_number(fault::kSlowStep);
      ADD_FAILURE() << spec << " was accepted";
    } catch (const trident::Error& e) {
      EXPECT_THAT(e.what(), HasSubstr("'slow-step' takes a non-negative integer")) << spec;
    }
  }
}

}  // namespace
