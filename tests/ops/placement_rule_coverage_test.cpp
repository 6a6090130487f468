// Registry-wide: every op states how tensor parallelism places it, a rule or
// explicitly none, so adding an op means deciding it rather than inheriting a default.
#include <gtest/gtest.h>

#include "ops/schema.h"

namespace strata {
namespace {

TEST(PlacementRuleCoverage, EveryOpStatesItsPlacementRule) {
  const std::vector<std::string> unstated = OpRegistry::global().names_where(
      [](const OpSchema& schema) { return schema.placement == PlacementRule::Unstated; });
  EXPECT_EQ(unstated, std::vector<std::string>{})
      << "these ops' schemas must say how tensor parallelism places them (PlacementRule::None: refused)";
}

}  // namespace
}  // namespace strata
