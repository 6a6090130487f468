// Expert parallelism in the planner: the divisors of a mixture of experts' expert count (1 for a dense
// model); a degree the user fixes is refused for a model without experts or one it does not divide;
// the all-to-all exchanges of the experts' rows, priced.
#include <fmt/format.h>

#include <algorithm>

#include "planner/comm_pricer.h"
#include "planner/cost_model.h"
#include "planner/expert_work.h"
#include "planner/plan_dimension.h"

namespace strata {

namespace {

std::vector<int> expert_degrees(const PlanningProblem& problem, int) {
  std::vector<int> degrees;
  for (int64_t degree : divisors(std::max<int64_t>(problem.model.num_experts, 1))) {
    degrees.push_back(static_cast<int>(degree));
  }
  return degrees;
}

std::optional<std::string> experts_not_divided(const PlanningProblem& problem, int degree) {
  const int64_t experts = problem.model.num_experts;
  if (degree == 1 || (experts > 0 && experts % degree == 0)) return std::nullopt;
  if (experts == 0) return std::string("expert parallelism for a model without experts");
  return fmt::format("expert parallelism that does not divide the {} experts", experts);
}

// Why the model cannot run the plan's expert parallelism, or nothing.
std::optional<std::string> experts_not_divided_by_plan(const PlanningProblem& problem, const ParallelPlan& plan) {
  const int64_t experts = problem.model.num_experts;
  const int degree = plan.degree("ep");
  if (experts == 0) {
    if (degree > 1) return fmt::format("expert parallelism {} for a model without experts", degree);
    return std::nullopt;
  }
  if (experts % degree != 0) {
    return fmt::format("expert parallelism {} does not divide the {} experts", degree, experts);
  }
  return std::nullopt;
}

// The experts' rows exchanged over the ep ranks (expert_work.h), each layer's, forward and backward.
MicroBatchComm expert_parallel_comm(const CommInput& input) {
  const PlanningProblem& problem = input.problem;
  const ExpertExchanges exchanges =
      expert_exchanges(problem.model, input.plan.micro_batch, input.seq, problem.dtype, input.degree);
  auto exchange = [&](const std::vector<CommCall>& calls) {
    double seconds = 0;
    for (const CommCall& call : calls) {
      seconds += input.pricer.collective(call.pattern, call.bytes, input.degree, input.stride, problem.dtype);
    }
    return seconds;
  };
  MicroBatchComm comm;
  comm.layer = {exchange(exchanges.forward), exchange(exchanges.backward)};
  return comm;
}

// The exchanges over the stage's step; full recomputation runs the forward's again.
std::vector<ExplainTerm> expert_parallel_terms(const StageCommInput& input) {
  const ParallelPlan& plan = input.comm.plan;
  const double exchange_forwards = plan.recompute == RecomputeMode::Full ? 2 : 1;
  const CommSeconds& layer = input.priced.layer;
  const double seconds = static_cast<double>(plan.micro_batches) * input.layers *
                         (exchange_forwards * layer.forward + layer.backward);
  if (seconds <= 0) return {};
  return {{"expert-parallel all-to-all", seconds,
           fmt::format("dispatch and return, forward and backward, per layer over ep={}; not overlapped",
                       input.comm.degree)}};
}

}  // namespace

PlannerDimension expert_parallel_planning() {
  return {.name = "ep",
          .parallelism = "expert",
          .fix_help = "Fix the expert-parallel degree (a mixture of experts: divides its experts)",
          .bound_help = "Largest expert-parallel degree",
          .degrees = expert_degrees,
          .refuse_fixed = experts_not_divided,
          .refuse_plan = experts_not_divided_by_plan,
          .micro_batch_comm = expert_parallel_comm,
          .explain_comm = expert_parallel_terms,
          .comm_name = "expert-parallel all-to-all",
          .shards_experts = true,
          .replicates_weights = true};
}

}  // namespace strata
