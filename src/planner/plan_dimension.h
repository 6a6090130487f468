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
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "parallel/pipeline_schedule.h"
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

// A `strata plan` flag of a dimension's option (`--<name>`): its help, and the limit a value given to it
// sets (failing, naming the flag, on a value it cannot take).
struct OptionFlag {
  std::string name;
  std::string help;
  std::function<void(const std::string& value, PlanLimits& limits)> fix;
};

// What the cost model reads of the pipeline dimension's options: the schedule its stages run and the
// model chunks per stage.
struct StageSchedule {
  PipelineSchedule schedule = PipelineSchedule::OneFOneB;
  int virtual_stages = 1;
};

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
  // The tokens of a sequence one device works on (the sequence over the degree of a dimension that splits it),
  // what a device computes in each layer for the micro-batch and each op's time on it, for a dimension whose
  // communication runs beside that compute (context parallelism's K/V ring beside the attention).
  int64_t seq = 0;
  const SegmentWork* layer_work = nullptr;
  std::function<double(const OpWork& op)> op_seconds;
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
  // Strata's runtime executes it (it is registered in parallel/parallel_dimension.h). A part that prices a
  // dimension of other runtimes only (context parallelism) is false: its place in the device order is in
  // priced_only_dimensions() (dimension_degrees.h), the search plans it only at the degree the user fixes
  // (`--<name> N`; never proposed), the trainer's plans never set it, and the report says the plan is not
  // Strata's to run.
  bool runtime_executes = true;
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
  // Its options in a plan's description ("sp", "1f1b v=2"; empty: none), after the degrees or, where
  // `options_described_last`, after the rest; and in the plan's JSON. The flags that fix them.
  std::function<std::string(const ParallelPlan& plan)> describe_options;
  bool options_described_last = false;
  std::function<void(const ParallelPlan& plan, nlohmann::json& json)> options_json;
  std::vector<OptionFlag> option_flags;

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
  // Its ranks split every sequence into `degree` parts (context parallelism): the per-device work is built at
  // seq / degree positions, every token-wise op on them, and the causal attention of a device's queries against
  // the whole sequence run as `degree` ring steps (workload.h's run_attention_over_ring); its communication
  // (micro_batch_comm) is the keys' and values' exchange between those steps.
  bool splits_sequence = false;
  // Its ranks hold the same weights (those it does not shard: a mixture's experts under the dimension that shards
  // them): their gradients are reduced over it and ZeRO shards over it. Any number of dimensions, nested next to
  // each other (their group one run of ranks in the device order).
  bool replicates_weights = false;
  // What the roles' options mean to the cost model: for the dimension that shards layers, the parts its ranks
  // split the residual stream's ops and values into (sequence parallelism: its degree; else 1); for the one that
  // splits layers, the schedule. Unset: 1, and 1F1B with one chunk per stage.
  std::function<int(const ParallelPlan& plan)> sequence_split;
  std::function<StageSchedule(const ParallelPlan& plan)> stage_schedule;
};

// Every planned parallel dimension's planner part, in the order the search nests them
// (outermost first: expert, tensor, pipeline, context, those registered, then data parallelism, which
// takes the devices left); a dimension registered without one gets a part of degree 1.
std::vector<PlannerDimension> planner_dimensions();
// Adds the planner part of a registered parallel dimension (a test's, or a plug-in's); fails on a
// name already taken.
void register_planner_dimension(PlannerDimension dimension);
// Removes a registered (not a built-in) planner part.
void unregister_planner_dimension(std::string_view name);

// What a plan sets above 1 that Strata's runtime does not execute ("context parallelism (cp=2) is priced as
// other runtimes run it; Strata's runtime does not execute it"), or nothing: the report and --explain say it.
std::optional<std::string> not_run_by_strata(const ParallelPlan& plan);

// 1, ..., n: every divisor of n, ascending.
std::vector<int64_t> divisors(int64_t n);
// A range of degrees (PlannerDimension::degrees) of every divisor of the devices left.
std::vector<int> divisors_of_devices(const PlanningProblem& problem, int devices);

// The built-in dimensions' planner parts, each in its own file.
PlannerDimension data_parallel_planning();
PlannerDimension tensor_parallel_planning();
PlannerDimension pipeline_planning();
PlannerDimension expert_parallel_planning();
PlannerDimension context_parallel_planning();

// How context parallelism's keys and values reach every rank (context_parallel_exchange.h): Transformer Engine's
// point-to-point ring (Megatron-Core's; the default), or PyTorch's context_parallel rotating them by one
// all-gather or by an all-to-all per step (torchtitan's `context_parallel_rotate_method`).
enum class ContextParallelExchange { Ring, AllGather, AllToAll };

// Their options' accessors, in the same files: tensor parallelism's sequence parallelism over its group
// (tensor_parallel_planning.cpp), pipeline parallelism's schedule and model chunks per device
// (interleaved only; pipeline_planning.cpp), context parallelism's exchange (context_parallel_planning.cpp).
// The `limits` ones say what the user fixed (nothing: open).
bool sequence_parallel(const ParallelPlan& plan);
void set_sequence_parallel(ParallelPlan& plan, bool on);
std::optional<bool> fixed_sequence_parallel(const PlanLimits& limits);
void fix_sequence_parallel(PlanLimits& limits, bool on);
PipelineSchedule pipeline_schedule(const ParallelPlan& plan);
void set_pipeline_schedule(ParallelPlan& plan, PipelineSchedule schedule);
int virtual_stages(const ParallelPlan& plan);
void set_virtual_stages(ParallelPlan& plan, int chunks);
std::optional<PipelineSchedule> fixed_pipeline_schedule(const PlanLimits& limits);
void fix_pipeline_schedule(PlanLimits& limits, PipelineSchedule schedule);
std::optional<int> fixed_virtual_stages(const PlanLimits& limits);
void fix_virtual_stages(PlanLimits& limits, int chunks);
ContextParallelExchange context_parallel_exchange(const ParallelPlan& plan);
void set_context_parallel_exchange(ParallelPlan& plan, ContextParallelExchange exchange);
std::optional<ContextParallelExchange> fixed_context_parallel_exchange(const PlanLimits& limits);
void fix_context_parallel_exchange(PlanLimits& limits, ContextParallelExchange exchange);

}  // namespace strata
