#pragma once
// A comparison as people and programs read it: the table (`strata compare`'s
// output: the first divergent op at the top, then the failures or every
// tensor, then the tolerance groups), JSON and CSV (every tensor).
#include <string>

#include <nlohmann/json.hpp>

#include "compare/comparison.h"

namespace strata {

struct ComparisonHeader {
  std::string baseline;   // what side a is: "ops.backend=ref", a golden dump's path
  std::string candidate;  // side b
  std::string batch;      // "16 x 128 tokens (the first micro-batch of step 1)"
};

std::string comparison_table(const Comparison& comparison, const ComparisonHeader& header, bool every_tensor);
nlohmann::json comparison_json(const Comparison& comparison, const ComparisonHeader& header);
std::string comparison_csv(const Comparison& comparison);

}  // namespace strata
