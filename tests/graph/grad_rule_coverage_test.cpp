// Registry-wide: every op states whether autodiff differentiates through it,
// and exactly the ops that say so have a gradient rule. Without this a missing
// rule shows only when some graph that needs it is differentiated.
#include <gtest/gtest.h>

#include <algorithm>

#include "graph/grad_rules.h"

namespace strata {
namespace {

TEST(GradRuleCoverage, EveryOpStatesWhetherItIsDifferentiable) {
  for (const std::string& op : OpRegistry::global().names()) {
    EXPECT_NE(OpRegistry::global().get(op).differentiable, Differentiable::Unstated)
        << "op '" << op << "': its schema must say whether autodiff differentiates through it";
  }
}

TEST(GradRuleCoverage, ExactlyTheDifferentiableOpsHaveGradientRules) {
  std::vector<std::string> differentiable = OpRegistry::global().names_where(
      [](const OpSchema& schema) { return schema.differentiable == Differentiable::Yes; });
  std::vector<std::string> with_rules = ops_with_grad_rules();
  for (const std::string& op : differentiable) {
    EXPECT_TRUE(std::binary_search(with_rules.begin(), with_rules.end(), op))
        << "op '" << op << "' is differentiable but has no gradient rule";
  }
  for (const std::string& op : with_rules) {
    EXPECT_TRUE(std::binary_search(differentiable.begin(), differentiable.end(), op))
        << "op '" << op << "' has a gradient rule but its schema does not say it is differentiable";
  }
}

}  // namespace
}  // namespace strata
