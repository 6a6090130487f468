#pragma once
// The cost model of one training step under a parallel plan.
//
// Time: per micro-batch and pipeline stage, the roofline time of every op of
// its layers (plus the embedding on the first stage, the head on the last),
// each dimension's communication as its planner part prices it
// (PlannerDimension::micro_batch_comm: the tensor/sequence-parallel collectives,
// the expert-parallel all-to-alls), the transfers to the neighbouring
// stages, ZeRO-2/3 collectives not hidden behind compute (ZeRO-3 unit by unit
// as FSDP runs it, fsdp_schedule.h), and adding the micro-batch's gradients to
// the accumulators. A pipeline of stage times t_i
// and m micro-batches takes (m - 1) max t_i + sum t_i (GPipe and 1F1B), or
// m max t_i + (sum t_i - max t_i) / v with v interleaved chunks. Then the
// gradient reduction over the weights' replicas is charged for the part the last
// backward pass cannot hide, the ZeRO-1/2 weight all-gather, and the optimizer.
//
// Memory: per stage, weights, fp32 master weights (when computing in a lower
// precision), fp32 gradient accumulators and AdamW moments, sharded over the
// weights' replicas by ZeRO stage; the activations each in-flight micro-batch keeps
// (GPipe keeps m, 1F1B keeps pp - stage, interleaving adds (pp-1)/(pp v)) for
// the recomputation mode, plus the backward temporaries of one segment beyond
// what the segments before it keep (the head's logits are gone when the layers
// run backward); or, at the end of a backward pass, the micro-batch's gradients
// before accumulation, with the tied embedding's two partial gradients being
// summed.
//
// It names no dimension: it reads the registered parts (plan_dimension.h) by role —
// the one that shards each layer's work (tensor parallelism: the workload's degree,
// its sequence split), the one that shards a mixture's experts, the one whose ranks
// run pipeline stages (their count, schedule and transfers), those whose ranks hold
// the same weights (the reduction's and ZeRO's groups), the one the exposed reduction
// is reported under — and adds each part's communication. Per-dimension terms are
// summed innermost first (the device order), as the sums always were: a sum's bits
// depend on its order, and plans must price as before.
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "parallel/pipeline_schedule.h"
#include "planner/comm_pricer.h"
#include "planner/device_time.h"
#include "planner/expert_work.h"
#include "planner/final_norm_work.h"
#include "planner/fp8_linears.h"
#include "planner/fsdp_copies.h"
#include "planner/fsdp_schedule.h"
#include "planner/hardware.h"
#include "planner/loss_work.h"
#include "planner/ring_merge_work.h"
#include "planner/model_comm.h"
#include "planner/plan.h"
#include "planner/plan_dimension.h"
#include "planner/tp_overlap.h"
#include "planner/workload.h"

namespace strata {

struct PlanningProblem {
  std::string model_name;
  ModelConfig model;
  int64_t global_batch = 0;  // rows per optimizer step
  int64_t seq = 0;           // tokens per row
  DType dtype = DType::F32;  // compute dtype of weights and activations
  ClusterSpec cluster;
  AttentionKernel attention = AttentionKernel::Fused;  // Strata's own kernels are fused
  // The library whose fused attention the run calls, one of the device's attention_libraries (hardware.h);
  // empty: the device's own engine.
  std::string attention_library;
  double bucket_bytes = 25.0 * 1024 * 1024;            // gradients per data-parallel collective (parallel.bucket_mb)
  // Gradients accumulated by the weight-gradient GEMMs themselves (Megatron's gradient-accumulation
  // fusion) rather than by a pass of their own after each micro-batch (Strata's trainer).
  bool fused_accumulation = false;
  // With fused accumulation, the embedding's dense gradient still added into the optimizer's fp32 gradient buffer
  // after every micro-batch (NeMo's distributed Adam: embedding_grad_work.h).
  bool embedding_grad_add = false;
  // Clipping scales the gradients in a pass of its own (PyTorch's clip_grad_norm_, Megatron's
  // multi_tensor_scale) rather than inside AdamW as it reads them (Strata's trainer).
  bool separate_clip = false;
  SelectivePolicy selective = SelectivePolicy::AttentionCore;  // what selective recomputation redoes
  bool dropout = false;  // Megatron's attention and residual dropout (dropout_work.h); Strata's trainer has none
  // Eager PyTorch running torchtitan's Llama: RMSNorm, rotary embedding and SwiGLU as PyTorch's op by op
  // decompositions (eager_work.h) rather than the one fused kernel each that Strata's graph and torch.compile run.
  bool eager = false;
  // torchtitan's complex rotary embedding under torch.compile: Inductor falls back to eager kernels for complex
  // operators, so the casts and the complex product run as kernels of their own (complex_rope_work.h); under `eager`
  // those kernels are already priced.
  bool complex_rope = false;
  // How the runtime enters the tensor-parallel region when several linears read one value (model_comm.h).
  TensorParallelInput tp_input = TensorParallelInput::PerLinear;
  // Sequence parallelism's gathers and reduce-scatters run beside the layer's GEMMs (tp_overlap.h).
  TpOverlap tp_overlap;
  LossKernel loss = LossKernel::Fused;  // how the run computes the loss (loss_work.h)
  // How the runtime merges context parallelism's ring steps (ring_merge_work.h); None: not priced.
  RingMerge ring_merge = RingMerge::None;
  // Every pipeline stage (and model chunk) holds as many layers, as Megatron splits them (num_layers // pp, each rank's
  // share again // virtual stages, divisibility asserted), instead of the split that balances the stages' time
  // (embedding on the first, head and loss on the last) and then their memory.
  bool even_stage_layers = false;
  // The model normalises all of q and all of k after their projections (OLMo 2's QK-norm, qk_norm_work.h), which
  // Strata's Llama does not: two more RMSNorms a layer, forward and backward.
  bool qk_norm = false;
  // Grouped-query attention run by an SDPA without GQA: k and v expanded to every query head first (kv_repeat_work.h,
  // OLMo-core's and torchtitan's Llama; copies of their own under `eager`), memory traffic each way that Strata's
  // grouped kernel does not move.
  bool kv_repeat = false;
  // How the run computes the model's final norm (final_norm_work.h): fused, or OLMo-core's RMSNorm in eager PyTorch.
  FinalNorm final_norm = FinalNorm::Fused;
  // The FSDP whose copies around its collectives a ZeRO-3 stage pays (fsdp_copies.h); None: the collectives only.
  FsdpRuntime fsdp = FsdpRuntime::None;
  // The dtype a ZeRO-3 stage reduce-scatters its gradients in (fsdp_copies.h): fp32, or the compute dtype
  // (Composer's PURE mixed precision).
  DType fsdp_reduce = DType::F32;
  // The layers' linears in float8 with this scaling recipe (fp8_linears.h), on the device's [device.fp8] engine.
  Fp8Recipe fp8 = Fp8Recipe::None;
  // The float8 linears' weights all-gathered in fp8 (torchao's enable_fsdp_float8_all_gather; Transformer Engine's
  // fp8 parameters under a distributed optimizer): ZeRO's weight all-gathers, ZeRO-3's gathered layers and FSDP's
  // copies move one byte for each of those weights.
  bool fp8_gather = false;
  // A mixture of experts' busiest expert's rows over the mean (expert_work.h): every rank's grouped GEMMs
  // are priced at that expert's rows. 1: perfectly balanced.
  double moe_imbalance = 1.0;
  // Throws naming what is impossible (no figures for the dtype, batch < 1, ...).
  void validate() const;

 private:
  void validate_fp8() const;  // float8 linears on a device with an fp8 engine, in a bf16/f16 model
};

class CostModel {
 public:
  explicit CostModel(PlanningProblem problem);
  CostModel(const CostModel&) = delete;  // the pricer refers to problem_.cluster
  CostModel& operator=(const CostModel&) = delete;

  const PlanningProblem& problem() const { return problem_; }
  // The same problem on other figures of its cluster (step_intervals' variations): what the model makes a device
  // compute and send does not depend on them, so it is shared with this model instead of built again.
  CostModel with_cluster(ClusterSpec cluster) const;

  // Why the plan cannot run at all (indivisible degrees and the like: each dimension's
  // PlannerDimension::refuse_plan among them), or nothing.
  std::optional<std::string> invalid_reason(const ParallelPlan& plan) const;
  // The prediction for a plan with no invalid_reason. The pipeline's step time
  // comes from a closed form (the search's: GPipe and 1F1B exact for equal
  // stages), or from replaying the schedule's actions on every stage with its
  // own times (parallel/pipeline_schedule.h's simulate_pipeline: the runtime's
  // schedule itself, exact for unequal stages and interleaving too).
  enum class PipelineTiming { ClosedForm, Replayed };
  Prediction evaluate(const ParallelPlan& plan, PipelineTiming timing = PipelineTiming::ClosedForm);

  // The first step of evaluate(): the plan's layers per stage and each stage's memory, all that a plan
  // that does not fit needs (the search prices the time of those that fit only).
  struct Placement {
    std::vector<int> layers;  // per stage
    std::vector<MemoryBreakdown> stages;
    MemoryBreakdown highest() const;  // the stage with the highest peak
  };
  Placement place(const ParallelPlan& plan);
  // evaluate() of a plan placed by place().
  Prediction evaluate(const ParallelPlan& plan, Placement placement,
                      PipelineTiming timing = PipelineTiming::ClosedForm);

  // Where the bottleneck stage's compute and communication time of a step go
  // (`prediction` from evaluate): per op class the seconds and FLOPs of its
  // forward, backward and recomputed forward over the step's micro-batches,
  // and each dimension's communication as its part breaks it down.
  struct ClassTime {
    double seconds = 0;
    double flops = 0;
  };
  struct StepAttribution {
    int stage = 0;
    std::map<OpKind, ClassTime> compute;  // recomputation included; the experts' and float8 GEMMs apart
    std::map<std::string, ClassTime> compute_by_op;  // the same by op type (the schema's name), experts' GEMMs in
    ClassTime expert_gemms;           // a mixture of experts' grouped GEMMs (their FLOPs: the active experts')
    ClassTime fp8_gemms;              // float8 linears' GEMMs (fp8_linears.h), on the float8 engine
    double expert_rows = 0;           // rows of the busiest expert a forward grouped GEMM runs per micro-batch
    int64_t experts_per_device = 0;   // a mixture of experts' experts over the dimension that shards them
    // Each dimension's communication over the step, innermost first, as its part breaks it down
    // (PlannerDimension::explain_comm), and the gradients' reduction exposed.
    std::vector<ExplainTerm> comm;
    ExplainTerm reduction;
    // The seconds of the communication term named `name` (0 where there is none).
    double comm_seconds(std::string_view name) const;
  };
  StepAttribution attribute(const Prediction& prediction);

  // FLOPs of one step's forward and backward passes without recomputation.
  double model_flops_per_step() const { return model_flops_per_step_; }
  // What a device computes for a micro-batch under tensor parallelism `tp`, with each sequence split into
  // `sequence_parts` (the degree of the dimension that splits sequences: context parallelism).
  const Workload& workload(int64_t micro_batch, int tp, int sequence_parts = 1);

 private:
  struct SegmentCost {
    double forward = 0;
    double backward = 0;
    double selective = 0;  // forward ops redone under selective recomputation
    // Each dimension's communication (PlannerDimension::micro_batch_comm), by registration position.
    std::array<CommSeconds, DimensionDegrees::kCapacity> comm{};
    // The ops' and every dimension's communication: the forward, the backward, the selectively redone forward
    // (selective_comm.h), and all of forward and backward.
    double forward_with_comm = 0, backward_with_comm = 0, selective_with_comm = 0, seconds = 0;
  };
  struct Costs {
    SegmentCost embedding, layer, head;
    double tied_gradient_sum = 0;
    double boundary_bytes = 0;  // what a stage boundary sends per micro-batch, each way
  };
  // A plan's per-micro-batch costs, kept for every plan with the same micro-batch, sequence parallelism and
  // degrees of the dimensions that shape them (cost_key_).
  const Costs& costs(const ParallelPlan& plan);
  // The communication the dimensions add to one micro-batch, each dimension's hook (micro_batch_comm), and the
  // segments' sums with it; `work` is the plan's per-device work.
  void add_dimension_comm(const ParallelPlan& plan, const ModelComm& graph, const Workload& work, Costs& costs);
  // The roles' positions and the parts with communication (below), from dimensions_.
  void find_roles();
  // The degree of the dimension in role `position` (tensor_, expert_, pipeline_), 1 where none has the role.
  static int role_degree(const ParallelPlan& plan, size_t position);
  // The roles' options: the tensor dimension's split of the residual stream, the pipeline's schedule.
  int sequence_split(const ParallelPlan& plan) const;
  // The tokens of a sequence one device works on (the sequence over the degree that splits it).
  int64_t device_seq(const ParallelPlan& plan) const;
  // A dimension's communication input for `plan` (the layer's work of `work`, the plan's per-device work, and its
  // op times, for what it runs beside).
  CommInput comm_input(const ParallelPlan& plan, int degree, int stride, const ModelComm& graph, const Workload& work);
  StageSchedule stage_schedule(const ParallelPlan& plan) const;
  const PlannerDimension& part_at(size_t position) const;  // the planner part of the dimension at `position`
  // One op's seconds (a residual-stream op split by sequence parallelism; the experts' grouped GEMMs as the
  // busiest of `ep` ranks runs them).
  double op_time(const OpWork& op, int sequence_split, int ep) const;
  ExpertLoad expert_load(int ep) const;  // the problem's experts over `ep` ranks (expert_work.h)
  // Fails when the fused attention the problem runs has no kernel for the model's head dim.
  void refuse_head_dim_without_kernel() const;
  double optimizer_seconds(double params_on_device, double gradients_on_device) const;
  double accumulate_seconds(double gradients, double micro_batches) const;

  // The steps of evaluate(), in order.
  struct PlanFigures;  // a plan and what every step reads of it
  struct StageTime;    // one pipeline stage's seconds per micro-batch
  PlanFigures plan_figures(const ParallelPlan& plan);
  // attribute()'s communication terms.
  void attribute_comm(const Prediction& prediction, const PlanFigures& figures, StepAttribution& attribution);
  std::vector<int> split_layers_by_time(const PlanFigures& figures);
  std::vector<MemoryBreakdown> memory_per_stage(const PlanFigures& figures, const std::vector<int>& layers) const;
  // A split balanced by time that does not fit gives way to one balanced by memory that needs less.
  void rebalance_by_memory(const PlanFigures& figures, std::vector<int>& layers,
                           std::vector<MemoryBreakdown>& stages) const;
  std::vector<StageTime> stage_times(const PlanFigures& figures, const std::vector<int>& layers);
  TimeBreakdown pipeline_time(const PlanFigures& figures, const std::vector<StageTime>& stages,
                              PipelineTiming timing);
  // A data-parallel reduction beside the last backward pass: the part it does not hide, and the
  // compute it slows down by running beside it.
  struct Overlap {
    double exposed = 0;
    double slowdown = 0;
  };
  Overlap stage_reduction(const PlanFigures& figures, int stage, int layers, const StageTime& time);
  // The slowest stage's, and the tied embedding's all-reduce.
  Overlap data_parallel_comm(const PlanFigures& figures, const std::vector<int>& layers,
                             const std::vector<StageTime>& stages);
  double slowest_optimizer(const PlanFigures& figures, const std::vector<int>& layers) const;
  double slowest_param_gather(const PlanFigures& figures, const std::vector<int>& layers);  // ZeRO-1/2
  void add_rates(Prediction& prediction) const;  // step time, tokens/s, MFU, hardware FLOPs

  // What those steps share.
  static double stage_params(const PlanFigures& figures, int stage, int layers);  // on one device
  // Of those, the experts' held apart from the dense ones (ep > 1: they are replicated over dp only).
  static double stage_expert_params(const PlanFigures& figures, int layers);
  // Parameters of a stage one device keeps when ZeRO shards them (`sharded`): the dense ones over dp x ep,
  // the experts' over dp.
  static double sharded_params(const PlanFigures& figures, int stage, int layers, bool sharded);
  // Whose activations `stage` of `stages` keeps.
  double micro_batches_kept(const StageSchedule& schedule, int64_t micro_batches, int stages, int stage) const;
  MemoryBreakdown stage_memory(const PlanFigures& figures, int stage, int layers) const;
  StageTime stage_time(const PlanFigures& figures, int stage, int layers, double p2p);
  // ZeRO-2/3 collectives of one micro-batch: what the stage's compute does not hide, and the compute
  // they slow down by running beside it. ZeRO-2 reduce-scatters beside the backward pass; ZeRO-3 runs
  // as FSDP does, unit by unit (fsdp_schedule.h).
  Overlap exposed_zero_comm(const PlanFigures& figures, int stage, int layers, const StageTime& time);
  FsdpStage fsdp_stage(const PlanFigures& figures, int stage, int layers, double params);
  // Seconds of FSDP's copies (fsdp_copies.h) per micro-batch: one layer's forward and backward (a gather each,
  // and the gradients), and the root unit's (gathered once, before the forward pass).
  struct FsdpCopyTimes {
    double layer_forward = 0, layer_backward = 0;
    double root_forward = 0, root_backward = 0;
    double total(int layers) const { return layers * (layer_forward + layer_backward) + root_forward + root_backward; }
  };
  FsdpCopyTimes fsdp_copy_times(const PlanFigures& figures, int stage, int layers) const;
  // One collective over the data-parallel group of `params` parameters' bytes (none for none); of
  // those, `experts` (ep > 1) go in a collective of their own over the dp ranks that replicate them.
  double data_parallel_collective(const PlanFigures& figures, comm::Collective op, double bytes_per_param,
                                  DType dtype, double params, double experts = 0);
  // A data-parallel collective per layer's bucket, plus one for the stage's embedding or head; a layer's
  // parameters of `layer_bytes_per_param` each when given (an fp8 weight gather), else `bytes_per_param`.
  double bucketed(const PlanFigures& figures, comm::Collective op, double bytes_per_param, DType dtype, double layers,
                  double params, double layer_bytes_per_param = 0);
  // Bytes per parameter of a layer's weights as gathered: fewer when its float8 linears' weights go in fp8.
  double layer_gather_width(const PlanFigures& figures) const;

  PlanningProblem problem_;
  CommPricer pricer_;
  OpWork adamw_, square_sums_, scale_, add_;  // per kReferenceElements fp32 elements
  std::vector<PlannerDimension> dimensions_;  // the planner's parts of the dimensions registered when built
  InnermostFirst innermost_;                  // their positions, in the order their terms are added
  // The registration position of the part with each role (PlannerDimension), kNoRole where none has it.
  static constexpr size_t kNoRole = DimensionDegrees::kCapacity;
  size_t tensor_ = kNoRole, expert_ = kNoRole, pipeline_ = kNoRole, reduction_ = kNoRole, sequence_ = kNoRole;
  const PlannerDimension* tensor_part_ = nullptr;
  const PlannerDimension* pipeline_part_ = nullptr;
  // The parts with communication of their own, by registration position (nullptr: none), and which degrees
  // shape a micro-batch's costs: those with a role in its work or communication and those nested inside them.
  std::array<const PlannerDimension*, DimensionDegrees::kCapacity> comm_parts_{};
  std::array<bool, DimensionDegrees::kCapacity> cost_key_{};
  std::array<bool, DimensionDegrees::kCapacity> replicates_weights_{};  // by position (PlannerDimension)
  double model_flops_per_step_ = 0;
  double selective_flops_per_row_ = 0;  // one layer's recomputed forward work per row, summed over layers
  double full_flops_per_row_ = 0;
  // What the problem makes a device compute and send, whatever the cluster's figures: (micro-batch, tp, sequence
  // parts) -> work; (micro-batch, seq, tp, sp) -> the runtime graph's communication (model_comm.h); (schedule,
  // stages, micro-batches, virtual stages) -> the actions a replay times (a few MiB for the largest pipelines;
  // the search replays a few dozen front runners, the step intervals each of them once per figure varied).
  struct ClusterFreeWork {
    std::map<std::tuple<int64_t, int, int>, std::unique_ptr<Workload>> workloads;
    std::map<std::tuple<int64_t, int64_t, int, bool>, ModelComm> comm;
    std::map<std::tuple<PipelineSchedule, int, int, int>, std::vector<std::vector<PipelineAction>>> schedules;
  };
  CostModel(PlanningProblem problem, std::shared_ptr<ClusterFreeWork> work);
  const ModelComm& comm_of(int64_t micro_batch, int64_t seq, int tp, bool sp);
  const std::vector<std::vector<PipelineAction>>& schedule_of(PipelineSchedule schedule, const PipelineShape& shape);

  std::shared_ptr<ClusterFreeWork> work_;  // shared with the models with_cluster() makes
  std::map<std::tuple<int64_t, DimensionDegrees, DimensionOptionValues>, Costs> costs_;
  // Layers per stage balanced by time: (pp, virtual stages, per-layer, first and last stage extra seconds).
  std::map<std::tuple<int, int, double, double, double>, std::vector<int>> time_splits_;
};

}  // namespace strata
