#include "ops/placement_rule.h"

namespace strata {

std::string_view placement_rule_name(PlacementRule rule) {
  switch (rule) {
    case PlacementRule::Unstated: return "unstated";
    case PlacementRule::None: return "none";
    case PlacementRule::Elementwise: return "element-wise";
    case PlacementRule::RowwiseNorm: return "row-wise norm";
    case PlacementRule::Linear: return "linear";
    case PlacementRule::Matmul: return "matmul";
    case PlacementRule::AttentionByHeads: return "attention by heads";
    case PlacementRule::RotaryByHeads: return "rotary by heads";
    case PlacementRule::VocabLookup: return "vocabulary lookup";
    case PlacementRule::VocabLoss: return "vocabulary loss";
    case PlacementRule::ExpertGroups: return "expert groups";
    case PlacementRule::ExpertCombine: return "expert combine";
    case PlacementRule::WholeSequence: return "whole sequence";
  }
  return "?";
}

bool passes_sequence_split(PlacementRule rule) {
  return rule == PlacementRule::Elementwise || rule == PlacementRule::RowwiseNorm;
}

}  // namespace strata
