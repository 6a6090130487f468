// Tensor parallelism in the planner: every degree dividing the devices left, refused where it does not
// divide the attention heads; sequence parallelism, off and on, over its group; the collectives the
// runtime's graph makes under it, priced.
#include <fmt/format.h>

#include <map>

#include "parallel/parallel_settings.h"
#include "core/error.h"
#include "planner/cost_model.h"
#include "planner/plan_dimension.h"
#include "planner/model_comm.h"
#include "planner/search.h"
#include "planner/selective_comm.h"

namespace strata {

namespace {

// Where its options are held in a plan (DimensionOptionValues): sequence parallelism, 1 when on.
size_t position() {
  static const size_t tensor = dimension_position("tp");  // a built-in's position never changes
  return tensor;
}
constexpr size_t kSequenceParallel = 0;

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
  if (sequence_parallel(plan) && degree == 1) return std::string("sequence parallelism needs tensor parallelism > 1");
  return std::nullopt;
}

void sequence_parallel_options(const ParallelPlan& plan, const OptionSearch& search, const EmitPlan& emit) {
  const std::optional<bool> fixed = fixed_sequence_parallel(search.limits);
  for (bool sp : {false, true}) {
    if ((fixed && *fixed != sp) || (sp && plan.degree("tp") == 1)) continue;
    ParallelPlan option = plan;
    set_sequence_parallel(option, sp);
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

void fix_sequence_parallel_flag(const std::string& value, PlanLimits& limits) {
  if (value != "on" && value != "off") fail("--sp must be on or off, got '{}'", value);
  fix_sequence_parallel(limits, value == "on");
}

}  // namespace

bool sequence_parallel(const ParallelPlan& plan) { return plan.options.at(position(), kSequenceParallel) == 1; }

void set_sequence_parallel(ParallelPlan& plan, bool on) { plan.options.set_at(position(), kSequenceParallel, on); }

std::optional<bool> fixed_sequence_parallel(const PlanLimits& limits) {
  const int fixed = limits.fixed_options.at(position(), kSequenceParallel);
  if (fixed == DimensionOptionValues::kOpen) return std::nullopt;
  return fixed == 1;
}

void fix_sequence_parallel(PlanLimits& limits, bool on) {
  limits.fixed_options.set_at(position(), kSequenceParallel, on);
}

PlannerDimension tensor_parallel_planning() {
  return {.name = "tp",
          .parallelism = "tensor",
          .fix_help = "Fix the tensor-parallel degree",
          .bound_help = "Largest tensor-parallel degree",
          .degrees = divisors_of_devices,
          .reject_layout = heads_not_divided,
          .refuse_plan = heads_not_divided_by_plan,
          .options = sequence_parallel_options,
          .read_settings = [](const ParallelSettings& settings,
                              ParallelPlan& plan) { set_sequence_parallel(plan, settings.sp); },
          .write_settings = [](const ParallelPlan& plan,
                               ParallelSettings& settings) { settings.sp = sequence_parallel(plan); },
          .fix_settings = [](const ParallelSettings& settings,
                             PlanLimits& limits) { fix_sequence_parallel(limits, settings.sp); },
          .describe_options = [](const ParallelPlan& plan) { return std::string(sequence_parallel(plan) ? "sp" : ""); },
          .options_json = [](const ParallelPlan& plan, nlohmann::json& json) { json["sp"] = sequence_parallel(plan); },
          .option_flags = {{"sp", "Sequence parallelism: on or off", fix_sequence_parallel_flag}},
          .micro_batch_comm = tensor_parallel_comm,
          .explain_comm = tensor_parallel_terms,
          .comm_name = "tensor-parallel collectives",
          .shards_layers = true,
          .sequence_split = [](const ParallelPlan& plan) {
            return sequence_parallel(plan) ? plan.degrees.at(position()) : 1;
          }};
}

}  // namespace strata
