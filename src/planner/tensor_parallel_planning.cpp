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
#include "planner/tp_overlap.h"
#include "planner/workload.h"

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

// The layer's linears in graph order, those reading one value together (q, k, v; gate, up) as one group.
std::vector<std::vector<const OpWork*>> linear_groups(const CommInput& input) {
  std::vector<std::vector<const OpWork*>> groups;
  int previous_input = -1;
  for (const OpWork& op : input.layer_work->forward) {
    if (op.kind != OpKind::Gemm || op.gemm.batch != 1) continue;  // batched: unfused attention's, experts'
    const bool joins = op.gemm_input >= 0 && op.gemm_input == previous_input;
    if (!joins) groups.emplace_back();
    groups.back().push_back(&op);
    previous_input = op.gemm_input;
  }
  return groups;
}

// One of `parts` chunks of a linear's rows (the tokens) as its own GEMM: the operands and output that are
// split shrink with it, the weight is read whole again.
OpWork row_chunk(const OpWork& op, int parts) {
  OpWork chunk = op;
  const GemmShape& s = op.gemm;
  chunk.gemm.m = (s.m + parts - 1) / parts;
  const double whole = static_cast<double>(s.m * s.k + s.k * s.n + s.m * s.n);
  const double part = static_cast<double>(chunk.gemm.m * s.k + s.k * s.n + chunk.gemm.m * s.n);
  chunk.bytes = op.bytes * part / whole;
  chunk.flops = op.flops * static_cast<double>(chunk.gemm.m) / static_cast<double>(s.m);
  return chunk;
}

double sum(const std::vector<double>& seconds) {
  double total = 0;
  for (double s : seconds) total += s;
  return total;
}

// Each call's seconds: exposed, or under --tp-overlap what it adds beyond the layer's GEMM it runs beside
// (tp_overlap.h; exposed where the layer's collectives do not pair with its linears).
struct CallSeconds {
  std::vector<double> forward, backward;
  bool overlapped = false;  // the layer's gathers and reduce-scatters beside its linears
};
std::vector<double> exposed(const CommInput& input, const std::vector<CommWork>& calls) {
  std::vector<double> seconds;
  for (const CommWork& call : calls) {
    seconds.push_back(input.pricer.collective(call.pattern, call.bytes, call.ranks, input.stride, call.dtype));
  }
  return seconds;
}

CallSeconds layer_call_seconds(const CommInput& input) {
  const SegmentComm& layer = input.graph.layer;
  CallSeconds result{exposed(input, layer.forward), exposed(input, layer.backward)};
  const TpOverlap& overlap = input.problem.tp_overlap;
  // Both runtimes map their peers' buffers over the node's links (CUDA IPC): a group across nodes stays exposed.
  const bool in_node = input.degree * input.stride <= input.problem.cluster.devices_per_node;
  if (overlap.runtime == TpOverlapRuntime::None || input.layer_work == nullptr || !in_node) return result;
  const std::vector<std::vector<const OpWork*>> groups = linear_groups(input);
  std::vector<double> linears;
  std::vector<int> gemms;
  for (const auto& group : groups) {
    linears.push_back(0);
    for (const OpWork* op : group) linears.back() += input.op_seconds(*op);
    gemms.push_back(static_cast<int>(group.size()));
  }
  auto chunk = [&](size_t linear, int parts) {
    double seconds = 0;
    for (const OpWork* op : groups[linear]) seconds += input.op_seconds(row_chunk(*op, parts));
    return seconds;
  };
  auto memory = [&](double bytes, double adds) {
    OpWork pass;
    pass.op = adds > 0 ? "add" : "copy";
    pass.bytes = bytes;
    pass.flops = adds;
    return input.op_seconds(pass);
  };
  const DeviceSpec& device = input.problem.cluster.device;
  const OverlapInput paired{overlap, linears, gemms, chunk, memory, input.degree,
                            device.performance(input.problem.dtype).gemm.compute_units, device.comm_compute_slowdown};
  std::vector<double> forward = overlapped_seconds(paired, layer.forward, result.forward, false);
  std::vector<double> backward = overlapped_seconds(paired, layer.backward, result.backward, true);
  if (forward.empty() || backward.empty()) return result;
  return {std::move(forward), std::move(backward), true};
}

// The tensor (and sequence) parallel collectives of the runtime's graph (model_comm.h), each over its
// group; selective recomputation runs again those its policy does not keep (selective_comm.h), exposed.
MicroBatchComm tensor_parallel_comm(const CommInput& input) {
  auto price = [&](const std::vector<CommWork>& calls) { return sum(exposed(input, calls)); };
  const ModelComm& graph = input.graph;
  const CallSeconds layer = layer_call_seconds(input);
  MicroBatchComm comm;
  comm.embedding = {price(graph.embedding.forward), price(graph.embedding.backward)};
  comm.layer = {sum(layer.forward), sum(layer.backward),
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
  auto add = [&](const std::vector<CommWork>& calls, const std::vector<double>& each, double times) {
    for (size_t i = 0; i < calls.size(); ++i) seconds[calls[i].pattern] += times * each[i];
  };
  auto price = [&](const std::vector<CommWork>& calls, double times) { add(calls, exposed(comm, calls), times); };
  const double m = static_cast<double>(plan.micro_batches), layers = input.layers;
  const double layer_forwards = plan.recompute == RecomputeMode::Full ? 2 : 1;
  const CallSeconds layer = layer_call_seconds(comm);
  add(comm.graph.layer.forward, layer.forward, layer_forwards * m * layers);
  if (plan.recompute == RecomputeMode::Selective) {
    price(recomputed_collectives(comm.graph.layer, comm.problem.selective), m * layers);
  }
  add(comm.graph.layer.backward, layer.backward, m * layers);
  if (input.first) {
    price(comm.graph.embedding.forward, m);
    price(comm.graph.embedding.backward, m);
  }
  if (input.last) {
    price(comm.graph.head.forward, m);
    price(comm.graph.head.backward, m);
  }
  std::vector<ExplainTerm> terms;
  for (const auto& [pattern, total] : seconds) {
    const bool chunked =
        layer.overlapped && (pattern == CommPattern::AllGather || pattern == CommPattern::ReduceScatter);
    const char* detail = chunked ? "beside the layers' GEMMs (--tp-overlap): what the chunked schedules leave "
                                   "exposed, the SMs taken, the contention, async TP's copies, sums and unfused "
                                   "reduce-scatters"
                                 : "not overlapped";
    terms.push_back({pattern_name(pattern), total, detail});
  }
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
