#pragma once
// The planner's part of each parallel dimension (parallel/parallel_dimension.h): the degrees the
// search tries, the layouts it cannot run and why, the options it adds to a plan (sequence
// parallelism, pipeline schedules), its `strata plan` flags, and what a degree costs: the
// communication it adds to each micro-batch, priced in its own file, and the roles the cost model's
// structure reads (the pipeline's stages, the per-device work's shards, the gradients' reduction).
// Registered by the dimension's name, as the runtime's part is; a dimension without a planner part is
// planned at degree 1. The search, the report, the plan's JSON, the flags and the cost model
// (cost_model.h) loop over these.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "planner/plan.h"

namespace strata {

struct PlanningProblem;
struct PlanLimits;
struct ParallelSettings;
struct ModelComm;
class CommPricer;

// What a dimension's options read: the problem, the user's limits, and where a plan that cannot
// run is counted (as a rejected region of plans, with its reason).
struct OptionSearch {
  const PlanningProblem& problem;
  const PlanLimits& limits;
  std::function<void(const std::string& reason, const ParallelPlan& plan)> reject;
};
using EmitPlan = std::function<void(const ParallelPlan& plan)>;

// A dimension's communication in one micro-batch's time (seconds) in one segment of the model: its
// forward's, its backward's, and of the forward's what selective recomputation runs again.
struct CommSeconds {
  double forward = 0;
  double backward = 0;
  double selective = 0;
};
// The embedding's (the first stage's), each layer's and the head's (the last stage's).
struct MicroBatchComm {
  CommSeconds embedding, layer, head;
};
// One term of `strata plan --explain`'s step time (explain.h).
struct ExplainTerm {
  std::string name;
  double seconds = 0;
  std::string detail;  // e.g. "41% of the matrix peak"
};
// What a dimension's communication reads. The cost model keeps the answer for every plan with the
// same micro-batch, options and degrees of this dimension and of those nested inside it.
struct CommInput {
  const PlanningProblem& problem;
  const ParallelPlan& plan;  // the micro-batch, the options, the degrees
  int degree = 1;            // this dimension's
  int stride = 1;            // devices between neighbouring ranks of its group (the degrees nested inside it)
  const ModelComm& graph;    // the calls of the runtime's graph for the micro-batch, split by its passes (model_comm.h)
  CommPricer& pricer;
};
// What a dimension's terms of --explain read: its communication's input and its answer for the plan,
// and the bottleneck stage the step is attributed on.
struct StageCommInput {
  const CommInput& comm;
  const MicroBatchComm& priced;      // micro_batch_comm's answer
  double layers = 0;                 // the stage's
  bool first = false, last = false;  // whether it holds the embedding, the head
};

struct PlannerDimension {
  std::string name;         // the parallel dimension's
  std::string parallelism;  // how messages name it: "data" ("layouts whose data parallelism ...")
  std::string fix_help;     // `strata plan --<name>`
  std::string bound_help;   // `strata plan --max-<name>`; empty: no such flag
  // Its degree is the devices the other dimensions leave (one dimension: data parallelism).
  bool takes_remaining_devices = false;
  // The degrees to search, ascending, with `devices` left to it and the dimensions the search
  // nests inside it; those not dividing `devices` are skipped. Unset: 1 only.
  std::function<std::vector<int>(const PlanningProblem& problem, int devices)> degrees;
  // Why no plan can run at a degree the user fixed (the search stops there), or nothing.
  std::function<std::optional<std::string>(const PlanningProblem& problem, int degree)> refuse_fixed;
  // Why a layout at `degree` cannot run: the reason of the rejected region it is counted in.
  std::function<std::optional<std::string>(const PlanningProblem& problem, int degree)> reject_layout;
  // Why the cost model cannot price `plan` along this dimension (its degree or options), or nothing.
  std::function<std::optional<std::string>(const PlanningProblem& problem, const ParallelPlan& plan)> refuse_plan;
  // The plans `plan` stands for along the dimension's own options, each given to `emit`. Unset:
  // `plan` alone.
  std::function<void(const ParallelPlan& plan, const OptionSearch& search, const EmitPlan& emit)> options;
  // Its options between a job's parallel.* settings and a plan (plan_settings.h): read into a plan (a
  // manual layout), written from one (an auto plan), and held fixed in the search's limits.
  std::function<void(const ParallelSettings& settings, ParallelPlan& plan)> read_settings;
  std::function<void(const ParallelPlan& plan, ParallelSettings& settings)> write_settings;
  std::function<void(const ParallelSettings& settings, PlanLimits& limits)> fix_settings;

  // What a degree costs (cost_model.h). Its communication in each micro-batch, in the stages' time
  // (TimeBreakdown::comm); unset: none.
  std::function<MicroBatchComm(const CommInput& input)> micro_batch_comm;
  // Its communication over the bottleneck stage's step (`plan.micro_batches` micro-batches, recomputation's
  // share included), term by term, for --explain. Unset: one term, comm_name with its time.
  std::function<std::vector<ExplainTerm>(const StageCommInput& input)> explain_comm;
  // The report's name of its time term ("tensor-parallel collectives"; the JSON key "<name>_comm"). Empty: none.
  std::string comm_name;
  // The roles the cost model's structure reads, each of one dimension at most (none: degree 1):
  bool shards_layers = false;      // its ranks split every layer's work and weights (workload.h's tensor parallelism)
  bool shards_experts = false;     // its ranks split a mixture of experts' experts (expert_work.h)
  bool splits_layers = false;      // its ranks run consecutive pipeline stages: the layer split, the schedule, and
                                   // the stage boundaries' transfers, its comm time
  bool reduces_gradients = false;  // the step's gradient reduction not hidden is its time (TimeBreakdown::reduction)
};

// Every registered parallel dimension's planner part, in the order the search nests them
// (outermost first: expert, tensor, pipeline, those registered, then data parallelism, which takes
// the devices left); a dimension registered without one gets a part of degree 1.
std::vector<PlannerDimension> planner_dimensions();
// Adds the planner part of a registered parallel dimension (a test's, or a plug-in's); fails on a
// name already taken.
void register_planner_dimension(PlannerDimension dimension);
// Removes a registered (not a built-in) planner part.
void unregister_planner_dimension(std::string_view name);

// 1, ..., n: every divisor of n, ascending.
std::vector<int64_t> divisors(int64_t n);
// A range of degrees (PlannerDimension::degrees) of every divisor of the devices left.
std::vector<int> divisors_of_devices(const PlanningProblem& problem, int devices);

// The built-in dimensions' planner parts, each in its own file.
PlannerDimension data_parallel_planning();
PlannerDimension tensor_parallel_planning();
PlannerDimension pipeline_planning();
PlannerDimension expert_parallel_planning();

}  // namespace strata
