// The planner's parallel dimensions: a plan's degrees by name, the order the search nests the
// dimensions in, and what registering a planner part checks.
#include "planner/plan_dimension.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/parallel_dimension.h"
#include "planner/model_spec.h"
#include "planner/search.h"
#include "planner_test_support.h"

namespace strata {
namespace {

PlanningProblem small_problem() {
  const ModelSpec spec = model_preset("gpt2-small");
  return {spec.name, spec.config, 8, spec.config.block_size, DType::F32, testing::test_cluster(1, 4, 80)};
}

// A runtime dimension of one coordinate registered for one test.
class RegisteredDimension {
 public:
  RegisteredDimension() { register_parallel_dimension({.name = "zp", .nesting = 4}); }
  ~RegisteredDimension() { unregister_parallel_dimension("zp"); }
};

std::vector<std::string> names(const std::vector<PlannerDimension>& parts) {
  std::vector<std::string> result;
  for (const PlannerDimension& part : parts) result.push_back(part.name);
  return result;
}

TEST(PlannerDimensions, APlansDegreesAreReadAndWrittenByName) {
  DimensionDegrees degrees;
  degrees.set("dp", 4);
  degrees.set("tp", 2);
  EXPECT_EQ(degrees["dp"], 4);
  EXPECT_EQ(degrees["pp"], 1);
  EXPECT_EQ(degrees.product(), 8);
  EXPECT_EQ(degrees.batch_replicas(), 4);
  EXPECT_EQ(degrees.describe(), "dp=4 tp=2 pp=1");  // expert parallelism named only above 1
  degrees.set("ep", 2);
  EXPECT_EQ(degrees.describe(), "dp=4 tp=2 pp=1 ep=2");
  EXPECT_EQ(degrees.batch_replicas(), 8);  // the rows split over dp x ep
  EXPECT_EQ(degrees_product_name(), "dp x tp x pp x ep");  // the runtime's dimensions
  // Context parallelism, priced for other runtimes only, is held beside them and named only above 1.
  degrees.set("cp", 2);
  EXPECT_EQ(degrees.describe(), "dp=4 tp=2 pp=1 ep=2 cp=2");
  EXPECT_EQ(degrees.product(), 32);
  EXPECT_EQ(degrees.batch_replicas(), 8);  // its ranks share their rows
  try {
    degrees.set("xp", 2);
    FAIL() << "an unregistered dimension was set";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("no parallel dimension 'xp'"), std::string::npos) << error.what();
  }
}

// The search nests expert, tensor, pipeline and context parallelism, then data parallelism takes the
// devices left; a dimension registered without a planner part goes before data parallelism at degree 1.
TEST(PlannerDimensions, ADimensionWithoutAPlannerPartIsPlannedAtOne) {
  EXPECT_EQ(names(planner_dimensions()), (std::vector<std::string>{"ep", "tp", "pp", "cp", "dp"}));
  CostModel plain_model(small_problem());
  const SearchResult plain = search_plans(plain_model, {}, 3);

  RegisteredDimension zp;
  EXPECT_EQ(names(planner_dimensions()), (std::vector<std::string>{"ep", "tp", "pp", "cp", "zp", "dp"}));
  CostModel model(small_problem());
  const SearchResult searched = search_plans(model, {}, 3);

  EXPECT_EQ(searched.candidates, plain.candidates);
  ASSERT_EQ(searched.ranked.size(), plain.ranked.size());
  for (size_t i = 0; i < plain.ranked.size(); ++i) {
    EXPECT_EQ(searched.ranked[i].step_s, plain.ranked[i].step_s);
    EXPECT_EQ(searched.ranked[i].plan.degree("zp"), 1);
  }
}

TEST(PlannerDimensions, APlannerPartNeedsItsRuntimeDimensionAndANameOfItsOwn) {
  EXPECT_THROW(register_planner_dimension({.name = "zp"}), Error);  // no parallel dimension 'zp'
  EXPECT_THROW(register_planner_dimension({.name = "tp"}), Error);  // a built-in's
  EXPECT_THROW(unregister_planner_dimension("tp"), Error);  // built-ins stay
  RegisteredDimension zp;
  EXPECT_THROW(register_planner_dimension({.name = "zp", .takes_remaining_devices = true}), Error);
  register_planner_dimension({.name = "zp"});
  EXPECT_THROW(register_planner_dimension({.name = "zp"}), Error);
  unregister_planner_dimension("zp");
}

}  // namespace
}  // namespace strata
