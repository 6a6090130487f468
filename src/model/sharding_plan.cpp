#include "model/sharding_plan.h"

namespace strata {

namespace {

// Glob match where '*' is any run of characters (backtracking on the last star).
bool matches(std::string_view pattern, std::string_view name) {
  size_t p = 0, n = 0, star = std::string_view::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (p < pattern.size() && pattern[p] == name[n]) {
      ++p;
      ++n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

}  // namespace

std::string_view shard_style_name(ShardStyle style) {
  switch (style) {
    case ShardStyle::Replicated: return "replicated";
    case ShardStyle::ColumnParallel: return "column-parallel";
    case ShardStyle::RowParallel: return "row-parallel";
    case ShardStyle::VocabParallel: return "vocab-parallel";
  }
  return "?";
}

ShardRule ShardingPlan::rule_for(const std::string& parameter) const {
  for (const ShardRule& rule : rules) {
    if (matches(rule.pattern, parameter)) return rule;
  }
  return {parameter, ShardStyle::Replicated, 1, WeightLayout::InOut};
}

bool ShardingPlan::stacked_over_experts(const std::string& parameter) const {
  for (const std::string& pattern : expert_stacked) {
    if (matches(pattern, parameter)) return true;
  }
  return false;
}

}  // namespace strata
