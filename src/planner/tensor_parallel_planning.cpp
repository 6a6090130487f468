// Tensor parallelism in the planner: every degree dividing the devices left, refused where it does not
// divide the attention heads; sequence parallelism, off and on, over its group; the collectives the
// runtime's graph makes under it, priced.
#include <fmt/format.h>

#include <map>

#include "parallel/parallel_settings.h"
#include "planner/cost_model.h"
#include "planner/plan_dimension.h"
#include "planner/model_comm.h"
#include "planner/search.h"
#include "planner/selective_comm.h"

namespace strata {

namespace {

std::optional<std::string> heads_not_divided(const PlanningProblem& problem, int degree) {
  if (problem.model.n_head % degree == 0) return std::nullopt;
  return fmt::format("layouts whose tensor parallelism does not divide the {} heads", problem.model.n_head);
}

// Why the plan's tensor (and sequence) parallelism cannot run the model, or nothing.
std::optional<std::string> heads_not_divided_by_plan(const PlanningProblem& problem, const ParallelPlan& plan) {
  const ModelConfig& model = problem.model;
  const int degree = plan.degree("tp");
  if (model.n_head % degree != 0 || model.kv_heads() % degree != 0) {
    return fmt::format("tensor parallelism {} does not divide the {} heads ({} key/value heads)", degree, model.n_head,
                       model.kv_heads());
  }
  if (plan.sp && degree == 1) return std::string("sequence parallelism needs tensor parallelism > 1");
  return std::nullopt;
}

void sequence_parallel_options(const ParallelPlan& plan, const OptionSearch& search, const EmitPlan& emit) {
  for (bool sp : {false, true}) {
    if ((search.limits.sp && *search.limits.sp != sp) || (sp && plan.degree("tp") == 1)) continue;
    ParallelPlan option = plan;
    option.sp = sp;
    emit(option);
  }
}

// The tensor (and sequence) parallel collectives of the runtime's graph (model_comm.h), each over its
// group; selective recomputation runs again those its policy does not keep (selective_comm.h).
MicroBatchComm tensor_parallel_comm(const CommInput& input) {
  auto price = [&](const std::vector<CommWork>& calls) {
    double seconds = 0;
    for (const CommWork& call : calls) {
      seconds += input.pricer.collective(call.pattern, call.bytes, call.ranks, input.stride, call.dtype);
    }
    return seconds;
  };
  const ModelComm& graph = input.graph;
  MicroBatchComm comm;
  comm.embedding = {price(graph.embedding.forward), price(graph.embedding.backward)};
  comm.layer = {price(graph.layer.forward), price(graph.layer.backward),
                price(recomputed_collectives(graph.layer, input.problem.selective))};
  comm.head = {price(graph.head.forward), price(graph.head.backward)};
  return comm;
}

const char* pattern_name(CommPattern pattern) {
  switch (pattern) {
    case CommPattern::AllReduce: return "tensor-parallel all-reduce";
    case CommPattern::AllGather: return "tensor-parallel all-gather";
    case CommPattern::ReduceScatter: return "tensor-parallel reduce-scatter";
    case CommPattern::AllToAll: return "all-to-all";
    case CommPattern::PointToPoint: return "tensor-parallel point-to-point";
  }
  return "tensor-parallel";
}

// The stage's collectives over the step by pattern: full recomputation runs the layer's forward ones again,
// selective those its policy does not keep.
std::vector<ExplainTerm> tensor_parallel_terms(const StageCommInput& input) {
  const CommInput& comm = input.comm;
  const ParallelPlan& plan = comm.plan;
  std::map<CommPattern, double> seconds;
  auto price = [&](const std::vector<CommWork>& calls, double times) {
    for (const CommWork& call : calls) {
      seconds[call.pattern] +=
          times * comm.pricer.collective(call.pattern, call.bytes, call.ranks, comm.stride, call.dtype);
    }
  };
  const double m = static_cast<double>(plan.micro_batches), layers = input.layers;
  const double layer_forwards = plan.recompute == RecomputeMode::Full ? 2 : 1;
  price(comm.graph.layer.forward, layer_forwards * m * layers);
  if (plan.recompute == RecomputeMode::Selective) {
    price(recomputed_collectives(comm.graph.layer, comm.problem.selective), m * layers);
  }
  price(comm.graph.layer.backward, m * layers);
  if (input.first) {
    price(comm.graph.embedding.forward, m);
    price(comm.graph.embedding.backward, m);
  }
  if (input.last) {
    price(comm.graph.head.forward, m);
    price(comm.graph.head.backward, m);
  }
  std::vector<ExplainTerm> terms;
  for (const auto& [pattern, total] : seconds) terms.push_back({pattern_name(pattern), total, "not overlapped"});
  return terms;
}

}  // namespace

PlannerDimension tensor_parallel_planning() {
  return {.name = "tp",
          .parallelism = "tensor",
          .fix_help = "Fix the tensor-parallel degree",
          .bound_help = "Largest tensor-parallel degree",
          .degrees = divisors_of_devices,
          .reject_layout = heads_not_divided,
          .refuse_plan = heads_not_divided_by_plan,
          .options = sequence_parallel_options,
          .read_settings = [](const ParallelSettings& settings, ParallelPlan& plan) { plan.sp = settings.sp; },
          .write_settings = [](const ParallelPlan& plan, ParallelSettings& settings) { settings.sp = plan.sp; },
          .fix_settings = [](const ParallelSettings& settings, PlanLimits& limits) { limits.sp = settings.sp; },
          .micro_batch_comm = tensor_parallel_comm,
          .explain_comm = tensor_parallel_terms,
          .comm_name = "tensor-parallel collectives",
          .shards_layers = true};
}

}  // namespace strata
