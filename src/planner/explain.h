#pragma once
// `strata plan --explain`: for the chosen plan and the runner-up, every term of
// the predicted step time (compute by op class with the efficiency it reaches,
// exposed communication by kind, pipeline bubble, optimizer, ...), the compute
// by op type (the ten largest in the text, all in JSON), and which
// figures of the cluster description the answer is most sensitive to: each
// figure made 10% worse in turn, both plans priced again, and whether their
// order flips.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "planner/cost_model.h"

namespace strata {

// One op type's share of the bottleneck stage's compute over the step (forward, backward, recomputed forward).
struct OpShare {
  std::string op;  // the op schema's name
  double seconds = 0;
  double flops = 0;
};

struct PlanExplanation {
  Prediction prediction;
  int stage = 0;  // the bottleneck stage the terms are attributed on
  std::vector<ExplainTerm> terms;
  std::vector<OpShare> ops;  // largest first: what a profile of the run can be set against, op by op
};

struct Sensitivity {
  std::string figure;        // what was made 10% worse
  double winner_change = 0;  // relative change of the winner's step time
  double runner_up_change = 0;
  bool order_flips = false;
};

struct Explanation {
  PlanExplanation winner;
  std::optional<PlanExplanation> runner_up;
  std::vector<Sensitivity> sensitivities;  // largest effect on the winner first
};

Explanation explain_plans(CostModel& model, const Prediction& winner, const Prediction* runner_up);
std::string format_explanation(const Explanation& explanation);
nlohmann::json explanation_json(const Explanation& explanation);

}  // namespace strata
