#include "planner/cost_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <queue>

#include "core/error.h"
#include "ops/schema.h"
#include "parallel/parallel_dimension.h"
#include "planner/complex_rope_work.h"
#include "planner/device_time.h"
#include "planner/dropout_work.h"
#include "planner/eager_work.h"
#include "planner/embedding_grad_work.h"
#include "planner/expert_work.h"
#include "planner/final_norm_work.h"
#include "planner/fsdp_schedule.h"
#include "planner/kv_repeat_work.h"
#include "planner/model_comm.h"
#include "planner/qk_norm_work.h"

namespace strata {

namespace {

using comm::Collective;

constexpr double kF32 = 4.0;

double total_flops(const SegmentWork& segment) {
  double flops = 0;
  for (const OpWork& op : segment.forward) flops += op.flops;
  for (const OpWork& op : segment.backward) flops += op.flops;
  return flops;
}

constexpr int64_t kReferenceElements = int64_t{1} << 20;

// An element-wise op over fp32 vectors of kReferenceElements, costed by its schema.
OpWork vector_op(const std::string& op, size_t operands, const Attrs& attrs = {}) {
  TensorMeta vector{{kReferenceElements}, DType::F32};
  OpCost cost = OpRegistry::global().cost(op, Metas(operands, vector), attrs);
  return {op, op, OpKind::Other, cost.flops, cost.bytes};
}

// Spreads `layers` over stages (each at least `minimum`) so that the largest
// load extra[i] + count[i] * per_layer[i] is smallest: one layer at a time to
// the stage whose load it raises least (optimal for loads linear in the
// count; ties go to the lower stage, so the split is deterministic).
std::vector<int> balance_layers(int layers, const std::vector<double>& per_layer, const std::vector<double>& extra,
                                int minimum) {
  const size_t stages = extra.size();
  std::vector<int> count(stages, minimum);
  using Entry = std::pair<double, size_t>;  // load after one more layer, stage
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> next;
  for (size_t i = 0; i < stages; ++i) next.emplace(extra[i] + (minimum + 1) * per_layer[i], i);
  for (int left = layers - minimum * static_cast<int>(stages); left > 0; --left) {
    size_t stage = next.top().second;
    next.pop();
    ++count[stage];
    next.emplace(extra[stage] + (count[stage] + 1) * per_layer[stage], stage);
  }
  return count;
}

// "dp 2 x ep 1": the degrees of the dimensions that split the batch.
std::string batch_split_text(const DimensionDegrees& degrees) {
  std::string text;
  for (const PlannedDimension& planned : planned_dimensions()) {
    const ParallelDimension& dimension = *planned.dimension;
    if (!dimension.splits_batch) continue;
    text += fmt::format("{}{} {}", text.empty() ? "" : " x ", dimension.name, degrees[dimension.name]);
  }
  return text;
}

MemoryBreakdown highest_peak(const std::vector<MemoryBreakdown>& stages) {
  return *std::max_element(stages.begin(), stages.end(),
                           [](const MemoryBreakdown& a, const MemoryBreakdown& b) { return a.peak < b.peak; });
}

}  // namespace

void PlanningProblem::validate() const {
  model.validate();
  if (global_batch < 1) fail("global batch must be at least 1 row, got {}", global_batch);
  if (seq < 1 || seq > model.block_size)
    fail("sequence length {} must be in [1, model.block_size = {}]", seq, model.block_size);
  cluster.validate();
  if (fsdp_reduce != DType::F32 && fsdp_reduce != DType::BF16 && fsdp_reduce != DType::F16) {
    fail("FSDP's gradient reduction (strata plan --fsdp-reduce) must be f32, bf16 or f16, got {}",
         dtype_name(fsdp_reduce));
  }
  if (!(moe_imbalance >= 1.0) || !std::isfinite(moe_imbalance)) {
    fail("the experts' imbalance (strata plan --moe-imbalance) is the busiest expert's tokens over the mean, at "
         "least 1, got {}",
         moe_imbalance);
  }
  cluster.device.performance(dtype);  // names the dtypes the device has when it lacks this one
  if (!cluster.device.computes(dtype)) {
    fail("{}: device '{}' computes {} on its vector units only (no matrix_tflops): plan in a dtype its matrix "
         "engine has",
         cluster.source, cluster.device.name, dtype_name(dtype));
  }
  validate_fp8();
}

void PlanningProblem::validate_fp8() const {
  if (fp8 == Fp8Recipe::None) {
    if (fp8_gather) fail("an fp8 all-gather of the weights (strata plan --fp8-gather on) needs float8 linears (--fp8)");
    return;
  }
  if (!cluster.device.fp8) {
    fail("{}: device '{}' has no float8 matrix engine (no [device.fp8] table), so float8 linears (strata plan --fp8 "
         "{}) cannot run on it",
         cluster.source, cluster.device.name, fp8_recipe_name(fp8));
  }
  if (dtype != DType::BF16 && dtype != DType::F16) {
    fail("float8 linears (strata plan --fp8) run in a bf16 or f16 model; the compute dtype is {}", dtype_name(dtype));
  }
}

CostModel::CostModel(PlanningProblem problem) : CostModel(std::move(problem), std::make_shared<ClusterFreeWork>()) {}

CostModel CostModel::with_cluster(ClusterSpec cluster) const {
  PlanningProblem problem = problem_;
  problem.cluster = std::move(cluster);
  return CostModel(std::move(problem), work_);
}

CostModel::CostModel(PlanningProblem problem, std::shared_ptr<ClusterFreeWork> work)
    : problem_(std::move(problem)),
      pricer_(problem_.cluster),
      adamw_(vector_op(
          "adamw", 4,
          {{"lr", 1e-3}, {"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.1}, {"step", int64_t{1}},
           {"grad_scale", 1.0}})),
      square_sums_(vector_op("square_sum_exact", 1)),
      scale_(vector_op("scale", 1, {{"factor", 1.0}})),
      add_(vector_op("add", 2)),
      dimensions_(planner_dimensions()),
      work_(std::move(work)) {
  problem_.validate();
  find_roles();
  if (!problem_.attention_library.empty()) {
    problem_.cluster.device.use_attention_library(problem_.dtype, problem_.attention_library);
  }
  refuse_head_dim_without_kernel();
  const Workload& one_row = workload(1, 1);
  double per_row = total_flops(one_row.embedding) + total_flops(one_row.head) +
                   static_cast<double>(problem_.model.n_layer) * total_flops(one_row.layer);
  model_flops_per_step_ = per_row * static_cast<double>(problem_.global_batch);
  for (const OpWork& op : one_row.layer.forward) {
    full_flops_per_row_ += op.flops;
    if (op.selective_recompute) selective_flops_per_row_ += op.flops;
  }
  selective_flops_per_row_ *= static_cast<double>(problem_.model.n_layer);
  full_flops_per_row_ *= static_cast<double>(problem_.model.n_layer);
}

const Workload& CostModel::workload(int64_t micro_batch, int tp, int sequence_parts) {
  auto key = std::make_tuple(micro_batch, tp, sequence_parts);
  auto found = work_->workloads.find(key);
  if (found == work_->workloads.end()) {
    const int64_t seq = problem_.seq / sequence_parts;  // the split's refuse_plan checks it divides
    auto built = std::make_unique<Workload>(
        build_workload(problem_.model, micro_batch, seq, tp, problem_.dtype, problem_.selective));
    if (problem_.dropout) {
      add_dropout(built->layer, problem_.model, micro_batch, seq, tp, problem_.dtype,
                  problem_.attention == AttentionKernel::Unfused, problem_.selective);
    }
    if (problem_.eager) add_eager_elementwise(built->layer, problem_.model, micro_batch, seq, tp, problem_.dtype);
    if (problem_.complex_rope && !problem_.eager) {
      add_complex_rope(built->layer, problem_.model, micro_batch, seq, tp, problem_.dtype);
    }
    if (problem_.qk_norm) add_qk_norm(built->layer, problem_.model, tp);
    if (problem_.kv_repeat) {
      add_kv_repeat(built->layer, problem_.model, micro_batch, seq, tp, problem_.dtype, problem_.eager);
    }
    if (problem_.embedding_grad_add && problem_.fused_accumulation) {
      add_embedding_grad_add(built->embedding, problem_.dtype);
    }
    add_final_norm_work(built->head, problem_.final_norm, problem_.model, micro_batch, seq, problem_.dtype);
    add_loss_work(built->head, problem_.loss, problem_.model, micro_batch, seq, tp, problem_.dtype);
    add_fp8_linears(built->layer, problem_.fp8, problem_.dtype, problem_.fp8_gather);
    if (sequence_parts > 1) {
      run_attention_over_ring(*built, sequence_parts);
      add_ring_merge(built->layer, problem_.ring_merge, problem_.model, sequence_parts, problem_.dtype);
    }
    found = work_->workloads.emplace(key, std::move(built)).first;
  }
  return *found->second;
}

const ModelComm& CostModel::comm_of(int64_t micro_batch, int64_t seq, int tp, bool sp) {
  const auto key = std::make_tuple(micro_batch, seq, tp, sp);
  auto found = work_->comm.find(key);
  if (found == work_->comm.end()) {
    found =
        work_->comm.emplace(key, model_comm(problem_.model, micro_batch, seq, tp, sp, problem_.dtype, problem_.tp_input))
            .first;
  }
  return found->second;
}

const std::vector<std::vector<PipelineAction>>& CostModel::schedule_of(PipelineSchedule schedule,
                                                                        const PipelineShape& shape) {
  const auto key = std::make_tuple(schedule, shape.stages, shape.micro_batches, shape.virtual_stages);
  auto found = work_->schedules.find(key);
  if (found == work_->schedules.end()) found = work_->schedules.emplace(key, pipeline_actions(schedule, shape)).first;
  return found->second;
}

void CostModel::refuse_head_dim_without_kernel() const {
  if (problem_.attention != AttentionKernel::Fused) return;
  const AttentionEngine& engine = problem_.cluster.device.performance(problem_.dtype).attention;
  const int64_t head_dim = problem_.model.head_size();
  if (engine.kernel_head_dim(head_dim)) return;
  const std::string library =
      problem_.attention_library.empty() ? "the device's fused attention" : "attention library '" + problem_.attention_library + "'";
  fail("{}: {} has kernels for head dims {} only; the model's head dim is {} (--attention unfused prices the "
       "attention as GEMMs)",
       problem_.cluster.source, library, fmt::join(engine.head_dims, ", "), head_dim);
}

ExpertLoad CostModel::expert_load(int ep) const {
  const GemmEngine& engine = problem_.cluster.device.performance(problem_.dtype).gemm;
  return {problem_.model.num_experts, ep, problem_.moe_imbalance, engine.alignment.front().first};
}

double CostModel::op_time(const OpWork& op, int sequence_split, int ep) const {
  if (is_expert_gemm(op)) {
    const OpWork busiest = busiest_expert_gemm(op, expert_load(ep), problem_.dtype);
    return op_seconds(busiest, problem_.cluster.device, problem_.dtype);
  }
  if (is_expert_elementwise(op)) return op_seconds(op, problem_.cluster.device, problem_.dtype, ep);
  return op_seconds(op, problem_.cluster.device, problem_.dtype, op.residual_stream ? 1.0 / sequence_split : 1.0,
                    problem_.attention);
}

void CostModel::find_roles() {
  for (const PlannerDimension& part : dimensions_) {
    const size_t position = dimension_position(part.name);
    for (auto [has, role, name] : {std::tuple{part.shards_layers, &tensor_, "shards layers"},
                                   {part.shards_experts, &expert_, "shards experts"},
                                   {part.splits_layers, &pipeline_, "splits layers"},
                                   {part.reduces_gradients, &reduction_, "reduces gradients"},
                                   {part.splits_sequence, &sequence_, "splits sequences"}}) {
      if (!has) continue;
      STRATA_CHECK(*role == kNoRole, "two planner dimensions have the role '{}' ('{}' the second)", name, part.name);
      *role = position;
    }
    if (part.micro_batch_comm) comm_parts_[position] = &part;
    replicates_weights_[position] = part.replicates_weights;
    if (part.shards_layers) tensor_part_ = &part;
    if (part.splits_layers) pipeline_part_ = &part;
  }
  STRATA_CHECK(reduction_ != kNoRole, "no planner dimension reports the gradients' reduction (reduces_gradients)");
  // A dimension's communication reads its own degree and the stride of those nested inside it: from the
  // outermost in, every dimension from the first that shapes a micro-batch's costs on.
  const std::vector<size_t> outermost_first(std::make_reverse_iterator(innermost_.end()),
                                            std::make_reverse_iterator(innermost_.begin()));
  bool inside = false;
  for (size_t position : outermost_first) {
    inside = inside || comm_parts_[position] != nullptr || position == tensor_ || position == expert_ ||
             position == sequence_;
    cost_key_[position] = inside;
  }
}

int CostModel::role_degree(const ParallelPlan& plan, size_t position) {
  return position == kNoRole ? 1 : plan.degrees.at(position);
}

int CostModel::sequence_split(const ParallelPlan& plan) const {
  return tensor_part_ != nullptr && tensor_part_->sequence_split ? tensor_part_->sequence_split(plan) : 1;
}

int64_t CostModel::device_seq(const ParallelPlan& plan) const { return problem_.seq / role_degree(plan, sequence_); }

CommInput CostModel::comm_input(const ParallelPlan& plan, int degree, int stride, const ModelComm& graph,
                                const Workload& work) {
  const int split = sequence_split(plan), ep = role_degree(plan, expert_);
  return {problem_, plan,   degree, stride, graph, pricer_, device_seq(plan), &work.layer,
          [this, split, ep](const OpWork& op) { return op_time(op, split, ep); }};
}

StageSchedule CostModel::stage_schedule(const ParallelPlan& plan) const {
  return pipeline_part_ != nullptr && pipeline_part_->stage_schedule ? pipeline_part_->stage_schedule(plan)
                                                                     : StageSchedule{};
}

void CostModel::add_dimension_comm(const ParallelPlan& plan, const ModelComm& graph, const Workload& work,
                                   Costs& costs) {
  int stride = 1;
  for (size_t position : innermost_) {
    const int degree = plan.degrees.at(position);
    if (const PlannerDimension* part = comm_parts_[position]) {
      const MicroBatchComm comm = part->micro_batch_comm(comm_input(plan, degree, stride, graph, work));
      costs.embedding.comm[position] = comm.embedding;
      costs.layer.comm[position] = comm.layer;
      costs.head.comm[position] = comm.head;
    }
    stride *= degree;
  }
  // The segments' sums with every dimension's communication, term by term innermost first (a sum's bits
  // depend on its order).
  for (SegmentCost* segment : {&costs.embedding, &costs.layer, &costs.head}) {
    segment->forward_with_comm = segment->forward;
    segment->backward_with_comm = segment->backward;
    segment->selective_with_comm = segment->selective;
    segment->seconds = segment->forward + segment->backward;
    for (size_t position : innermost_) {
      const CommSeconds& comm = segment->comm[position];
      segment->forward_with_comm += comm.forward;
      segment->backward_with_comm += comm.backward;
      segment->selective_with_comm += comm.selective;
      segment->seconds += comm.forward;
      segment->seconds += comm.backward;
    }
  }
}

const CostModel::Costs& CostModel::costs(const ParallelPlan& plan) {
  DimensionDegrees shaping;
  DimensionOptionValues options;
  for (size_t position : innermost_) {
    if (!cost_key_[position]) continue;
    shaping.set_at(position, plan.degrees.at(position));
    options.copy_dimension(position, plan.options);
  }
  auto key = std::make_tuple(plan.micro_batch, shaping, options);
  auto found = costs_.find(key);
  if (found != costs_.end()) return found->second;
  const int64_t micro_batch = plan.micro_batch;
  const int tp = role_degree(plan, tensor_), ep = role_degree(plan, expert_);
  const int split = sequence_split(plan);
  const bool sp = split > 1;  // sequence parallelism needs tensor parallelism (its refuse_plan)
  const Workload& work = workload(micro_batch, tp, role_degree(plan, sequence_));
  const DeviceSpec& device = problem_.cluster.device;
  auto segment_cost = [&](const SegmentWork& segment) {
    SegmentCost cost;
    for (const OpWork& op : segment.forward) {
      double seconds = op_time(op, split, ep);
      cost.forward += seconds;
      if (op.selective_recompute) cost.selective += seconds;
    }
    for (const OpWork& op : segment.backward) cost.backward += op_time(op, split, ep);
    return cost;
  };
  Costs result;
  result.embedding = segment_cost(work.embedding);
  result.layer = segment_cost(work.layer);
  result.head = segment_cost(work.head);
  result.tied_gradient_sum = op_seconds(work.tied_gradient_sum, device, problem_.dtype);
  // The collectives and the stage boundary as the runtime's graph has them (model_comm.h), priced by the
  // dimensions whose calls they are.
  const ModelComm& comm = comm_of(micro_batch, device_seq(plan), tp, sp);
  add_dimension_comm(plan, comm, work, result);
  result.boundary_bytes = comm.boundary_bytes;
  return costs_.emplace(key, result).first->second;
}

// AdamW over the parameters this device updates, after the gradient norm's sum of squares over the
// gradients it holds; clipping scales them in a pass of its own, or inside AdamW (separate_clip).
double CostModel::optimizer_seconds(double params_on_device, double gradients_on_device) const {
  const DeviceSpec& device = problem_.cluster.device;
  const double reference = static_cast<double>(kReferenceElements);
  const double clip = problem_.separate_clip ? op_seconds(scale_, device, DType::F32, gradients_on_device / reference)
                                             : 0.0;
  return op_seconds(adamw_, device, DType::F32, params_on_device / reference) +
         op_seconds(square_sums_, device, DType::F32, gradients_on_device / reference) + clip;
}

// The first micro-batch's gradients are copied into the accumulators, the others added.
double CostModel::accumulate_seconds(double gradients, double micro_batches) const {
  const DeviceSpec& device = problem_.cluster.device;
  double scale = gradients / static_cast<double>(kReferenceElements);
  OpWork copy = add_;
  copy.flops = 0;
  copy.bytes = add_.bytes * 2.0 / 3.0;  // read one operand instead of two
  return op_seconds(copy, device, DType::F32, scale) +
         (micro_batches - 1) * op_seconds(add_, device, DType::F32, scale);
}

std::optional<std::string> CostModel::invalid_reason(const ParallelPlan& plan) const {
  if (plan.degrees.least() < 1) return std::string("degrees must be at least 1");
  if (plan.devices() != problem_.cluster.devices()) {
    return fmt::format("{} = {} does not use the cluster's {} devices", degrees_product_name(), plan.devices(),
                       problem_.cluster.devices());
  }
  for (const PlannerDimension& dimension : dimensions_) {
    if (!dimension.refuse_plan) continue;
    if (auto why = dimension.refuse_plan(problem_, plan)) return why;
  }
  if (plan.micro_batch < 1 || plan.micro_batches < 1) return std::string("micro-batch size and count must be positive");
  if (plan.micro_batch * plan.micro_batches * plan.degrees.batch_replicas() != problem_.global_batch) {
    return fmt::format("{} x micro-batch {} x micro-batches {} is not the global batch {}",
                       batch_split_text(plan.degrees), plan.micro_batch, plan.micro_batches, problem_.global_batch);
  }
  if (plan.zero < 0 || plan.zero > 3) return fmt::format("ZeRO stage {} is not 0, 1, 2 or 3", plan.zero);
  const int chunks = plan.degree("pp") * virtual_stages(plan);
  if (problem_.even_stage_layers && problem_.model.n_layer % chunks != 0) {
    return fmt::format("{} layers do not split evenly over {} pipeline stages x {} virtual stages", problem_.model.n_layer,
                       plan.degree("pp"), virtual_stages(plan));
  }
  return std::nullopt;
}

struct CostModel::PlanFigures {
  const ParallelPlan& plan;
  const Workload& work;
  const Costs& cost;
  int p, v, t, d, zero;    // pipeline stages, virtual stages, tensor parallelism, dense replicas (dp x ep), ZeRO
  int e, expert_d;         // expert parallelism, and the data parallelism that replicates the experts
  // Devices between neighbouring ranks (the degrees nested inside) of the dense replicas, the experts' replicas
  // and the pipeline's stages.
  int d_stride, expert_d_stride, p_stride;
  double layer_params;     // parameters of a layer on one device (its E / ep experts)
  double layer_experts;    // of those, the experts' when ep > 1 (else 0: they go with the dense ones)
  double m;                // micro-batches
  int split;               // sequence parallelism's split of the residual stream
  double width;            // bytes of a compute-dtype element
  bool mixed;              // fp32 master weights beside the compute-dtype ones
  size_t mode;             // the recomputation mode, as an index of SegmentWork::saved
  double tied;             // parameters of one copy of the tied embedding on a device
  double layer_recompute;  // seconds per layer and micro-batch redone in backward
  double layer_seconds;    // seconds per layer and micro-batch, recomputation included
  std::vector<double> in_flight;  // per stage, the micro-batches whose activations it keeps
  PipelineSchedule schedule;      // the stages'
};

struct CostModel::StageTime {
  double compute = 0, recompute = 0, zero = 0, accumulate = 0;
  DimensionSeconds comm;     // each dimension's communication (the pipeline's: the transfers)
  double zero_slowdown = 0;  // compute slowed by the ZeRO-2/3 collectives running beside it
  double fsdp_copies = 0;    // FSDP's copies around its collectives (ZeRO-3)
  double backward = 0;  // the backward pass, for what it hides of the data-parallel reduction
  double forward = 0;   // the forward pass with its collectives and half the transfers (the replay's forward)
  double sum = 0;       // all of it (set last, by stage_time)
  double total() const { return sum; }
};

CostModel::PlanFigures CostModel::plan_figures(const ParallelPlan& plan) {
  const int t = role_degree(plan, tensor_), p = role_degree(plan, pipeline_), e = role_degree(plan, expert_);
  // The weights' replicas (dp x ep for the dense ones, dp for the experts) and where their groups begin.
  int d = 1, expert_d = 1, stride = 1, d_stride = 0, expert_d_stride = 0, p_stride = 1;
  for (size_t position : innermost_) {
    const int degree = plan.degrees.at(position);
    if (replicates_weights_[position]) {
      d *= degree;
      if (d_stride == 0) d_stride = stride;
      if (position != expert_) {
        expert_d *= degree;
        if (expert_d_stride == 0) expert_d_stride = stride;
      }
    }
    if (position == pipeline_) p_stride = stride;
    stride *= degree;
  }
  const Workload& work = workload(plan.micro_batch, t, role_degree(plan, sequence_));
  const Costs& cost = costs(plan);
  const SegmentCost& layer = cost.layer;
  double layer_recompute = plan.recompute == RecomputeMode::Selective ? layer.selective_with_comm
                           : plan.recompute == RecomputeMode::Full    ? layer.forward_with_comm
                                                                      : 0.0;
  const double experts_here = work.layer.expert_params / e;
  // Once per stage here: a search reads each stage's several times (memory_per_stage, rebalance_by_memory).
  std::vector<double> in_flight(static_cast<size_t>(p));
  const StageSchedule schedule = stage_schedule(plan);
  for (int stage = 0; stage < p; ++stage) {
    in_flight[static_cast<size_t>(stage)] = micro_batches_kept(schedule, plan.micro_batches, p, stage);
  }
  return PlanFigures{plan,
                     work,
                     cost,
                     p,
                     schedule.virtual_stages,
                     t,
                     d,
                     plan.zero,
                     e,
                     expert_d,
                     std::max(d_stride, 1),
                     std::max(expert_d_stride, 1),
                     p_stride,
                     work.layer.params - work.layer.expert_params + experts_here,
                     e > 1 ? experts_here : 0.0,
                     static_cast<double>(plan.micro_batches),
                     sequence_split(plan),
                     static_cast<double>(dtype_size(problem_.dtype)),
                     problem_.dtype != DType::F32,
                     static_cast<size_t>(plan.recompute),
                     static_cast<double>(((problem_.model.vocab_size + t - 1) / t) * problem_.model.n_embd),
                     layer_recompute,
                     layer.seconds + layer_recompute,
                     std::move(in_flight),
                     schedule.schedule};
}

std::vector<int> CostModel::split_layers_by_time(const PlanFigures& figures) {
  const size_t last = static_cast<size_t>(figures.p - 1);
  std::vector<double> per_layer(static_cast<size_t>(figures.p), figures.layer_seconds),
      extra(static_cast<size_t>(figures.p), 0.0);
  extra[0] += figures.cost.embedding.seconds;
  extra[last] += figures.cost.head.seconds + (figures.p == 1 ? figures.cost.tied_gradient_sum : 0.0);
  // The time split depends only on these figures, shared by many plans.
  auto key = std::make_tuple(figures.p, figures.v, figures.layer_seconds, extra[0], extra[last]);
  auto cached = time_splits_.find(key);
  if (cached == time_splits_.end()) {
    cached =
        time_splits_.emplace(key, balance_layers(static_cast<int>(problem_.model.n_layer), per_layer, extra, figures.v))
            .first;
  }
  return cached->second;
}

double CostModel::stage_params(const PlanFigures& figures, int stage, int layers) {
  double params = layers * figures.layer_params;
  if (stage == 0) params += figures.work.embedding.params;
  if (stage == figures.p - 1) params += figures.work.head.params + (figures.p > 1 ? figures.tied : 0.0);
  return params;
}

double CostModel::stage_expert_params(const PlanFigures& figures, int layers) { return layers * figures.layer_experts; }

double CostModel::sharded_params(const PlanFigures& figures, int stage, int layers, bool sharded) {
  const double params = stage_params(figures, stage, layers);
  if (!sharded) return params;
  const double experts = stage_expert_params(figures, layers);
  return (params - experts) / figures.d + experts / figures.expert_d;
}

double CostModel::micro_batches_kept(const StageSchedule& schedule, int64_t micro_batches, int stages,
                                     int stage) const {
  // The schedule's own warm-up (pipeline_schedule.h): the forwards a stage runs before its first
  // backward, plus the one it runs with it, each of a model chunk (1/v of the stage).
  const PipelineShape shape{stages, static_cast<int>(micro_batches), schedule.virtual_stages,
                            static_cast<int>(problem_.model.n_layer)};
  const PipelinePhases phases = pipeline_phases(schedule.schedule, shape, stage);
  const int chunks = std::min(phases.warmup + 1, phases.warmup + phases.steady);
  return std::min(static_cast<double>(micro_batches), static_cast<double>(chunks) / schedule.virtual_stages);
}

MemoryBreakdown CostModel::stage_memory(const PlanFigures& figures, int stage, int layers) const {
  const Workload& work = figures.work;
  const int zero = figures.zero, split = figures.split, e = figures.e;
  MemoryBreakdown mem;
  mem.stage = stage;
  const double params = stage_params(figures, stage, layers);
  // Bytes of `bytes_per_param` per parameter held, sharded by ZeRO or not.
  auto held = [&](double bytes_per_param, bool sharded) {
    if (stage_expert_params(figures, layers) == 0) return bytes_per_param * params / (sharded ? figures.d : 1);
    return bytes_per_param * sharded_params(figures, stage, layers, sharded);
  };
  mem.weights = held(figures.width, zero == 3);
  mem.master = figures.mixed ? held(kF32, zero >= 1) : 0.0;
  mem.gradients = held(kF32, zero >= 2);
  mem.optimizer = held(2 * kF32, zero >= 1);
  // One micro-batch's backward runs the head, the layers (the last first), then the embedding;
  // each segment's temporaries come on top of what the segments before it still keep, the
  // segments after it having released theirs.
  // Unfused attention keeps its [s, s] probabilities for backward unless recomputed (attention dropout,
  // off in today's runs, would keep a mask and its output besides).
  const bool scores_kept =
      problem_.attention == AttentionKernel::Unfused && figures.mode == static_cast<size_t>(RecomputeMode::None);
  const double scores = scores_kept ? static_cast<double>(work.micro_batch * (problem_.model.n_head / figures.t) *
                                                          work.seq * work.seq) *
                                          figures.width
                                    : 0.0;
  const double layer_saved = work.layer.saved[figures.mode].total(split, e) + scores;
  const double embedding_saved = stage == 0 ? work.embedding.saved[0].total(split) : 0.0;
  const double head_saved = stage == figures.p - 1 ? work.head.saved[0].total(split) : 0.0;
  double saved = layers * layer_saved + embedding_saved + head_saved;
  double temporaries = 0;
  if (stage == figures.p - 1) temporaries = work.head.peak.total(split) - head_saved;
  if (layers > 0) temporaries = std::max(temporaries, work.layer.peak.total(split, e) - layer_saved - head_saved);
  if (stage == 0) temporaries = std::max(temporaries, work.embedding.peak.total(split) - saved);
  mem.activations = figures.in_flight[static_cast<size_t>(stage)] * saved + temporaries;
  const double layer_params = figures.layer_params;
  mem.staging =
      (zero <= 1 ? params : layer_params) * figures.width + (figures.p == 1 ? work.tied_gradient_sum_extra : 0.0);
  // ZeRO-3 gathers two layers at a time (fsdp_schedule.h) and keeps the root unit (embedding, head) gathered.
  mem.buffers =
      zero == 3 ? 2 * layer_params * layer_gather_width(figures) + (params - layers * layer_params) * figures.width
                : 0.0;
  mem.peak =
      mem.weights + mem.master + mem.gradients + mem.optimizer + mem.buffers + std::max(mem.activations, mem.staging);
  mem.capacity = problem_.cluster.device.usable_memory_bytes();
  return mem;
}

std::vector<MemoryBreakdown> CostModel::memory_per_stage(const PlanFigures& figures,
                                                         const std::vector<int>& layers) const {
  std::vector<MemoryBreakdown> stages;
  for (int stage = 0; stage < figures.p; ++stage)
    stages.push_back(stage_memory(figures, stage, layers[static_cast<size_t>(stage)]));
  return stages;
}

void CostModel::rebalance_by_memory(const PlanFigures& figures, std::vector<int>& layers,
                                    std::vector<MemoryBreakdown>& stages) const {
  const MemoryBreakdown worst = highest_peak(stages);
  if (worst.peak <= worst.capacity || figures.p == 1) return;
  const size_t p = static_cast<size_t>(figures.p);
  std::vector<double> per_layer_bytes(p), base_bytes(p);
  for (int stage = 0; stage < figures.p; ++stage) {
    base_bytes[static_cast<size_t>(stage)] = stage_memory(figures, stage, 0).peak;
    per_layer_bytes[static_cast<size_t>(stage)] =
        stage_memory(figures, stage, 1).peak - base_bytes[static_cast<size_t>(stage)];
  }
  // No split beats the average stage; skip the search when even that does not fit.
  double least_slope = *std::min_element(per_layer_bytes.begin(), per_layer_bytes.end());
  double average = (std::accumulate(base_bytes.begin(), base_bytes.end(), 0.0) +
                    static_cast<double>(problem_.model.n_layer) * least_slope) /
                   figures.p;
  if (average > worst.capacity) return;
  std::vector<int> by_memory =
      balance_layers(static_cast<int>(problem_.model.n_layer), per_layer_bytes, base_bytes, figures.v);
  std::vector<MemoryBreakdown> alternative = memory_per_stage(figures, by_memory);
  if (highest_peak(alternative).peak < worst.peak) {
    layers = std::move(by_memory);
    stages = std::move(alternative);
  }
}

double CostModel::data_parallel_collective(const PlanFigures& figures, Collective op, double bytes_per_param,
                                           DType dtype, double params, double experts) {
  const double dense = params - experts;
  double seconds =
      dense > 0 ? pricer_.collective(op, bytes_per_param * dense, figures.d, figures.d_stride, dtype) : 0.0;
  // The experts' replicas lie ep x tp devices apart in the device order.
  if (experts > 0 && figures.expert_d > 1) {
    seconds += pricer_.collective(op, bytes_per_param * experts, figures.expert_d, figures.expert_d_stride, dtype);
  }
  return seconds;
}

double CostModel::bucketed(const PlanFigures& figures, Collective op, double bytes_per_param, DType dtype,
                           double layers, double params, double layer_bytes_per_param) {
  const double layer_params = figures.layer_params;
  const double layer_width = layer_bytes_per_param > 0 ? layer_bytes_per_param : bytes_per_param;
  return layers * data_parallel_collective(figures, op, layer_width, dtype, layer_params, figures.layer_experts) +
         data_parallel_collective(figures, op, bytes_per_param, dtype, params - layers * layer_params);
}

double CostModel::layer_gather_width(const PlanFigures& figures) const {
  if (!problem_.fp8_gather) return figures.width;
  return fp8_gather_width(figures.layer_params, fp8_weight_elements(figures.work.layer), figures.width);
}

CostModel::Overlap CostModel::exposed_zero_comm(const PlanFigures& figures, int stage, int layers,
                                                const StageTime& time) {
  Overlap result;
  if (figures.d == 1 || figures.zero < 2) return result;
  const double params = stage_params(figures, stage, layers);
  double busy = 0;
  if (figures.zero == 2) {
    busy = bucketed(figures, Collective::ReduceScatter, kF32, DType::F32, layers, params);
    result.exposed = std::max(0.0, busy - time.backward);
  } else {
    const FsdpExposure fsdp = fsdp_exposure(fsdp_stage(figures, stage, layers, params));
    result.exposed = fsdp.exposed;
    busy = fsdp.busy;
  }
  result.slowdown = problem_.cluster.device.comm_compute_slowdown * std::max(0.0, busy - result.exposed);
  return result;
}

CostModel::FsdpCopyTimes CostModel::fsdp_copy_times(const PlanFigures& figures, int stage, int layers) const {
  FsdpCopyTimes times;
  if (figures.zero != 3) return times;
  auto seconds = [&](const std::vector<OpWork>& ops) {
    double sum = 0;
    for (const OpWork& op : ops) sum += op_seconds(op, problem_.cluster.device, problem_.dtype);
    return sum;
  };
  const FsdpUnitCopies layer = fsdp_unit_copies(problem_.fsdp, figures.layer_params, figures.d, problem_.dtype,
                                                problem_.fsdp_reduce, layer_gather_width(figures));
  times.layer_forward = seconds(layer.per_gather);
  times.layer_backward = seconds(layer.per_gather) + seconds(layer.per_backward);
  const double root_params = stage_params(figures, stage, layers) - layers * figures.layer_params;
  const FsdpUnitCopies root =
      fsdp_unit_copies(problem_.fsdp, root_params, figures.d, problem_.dtype, problem_.fsdp_reduce);
  times.root_forward = seconds(root.per_gather);
  times.root_backward = seconds(root.per_backward);
  return times;
}

FsdpStage CostModel::fsdp_stage(const PlanFigures& figures, int stage, int layers, double params) {
  const Costs& cost = figures.cost;
  const double layer_params = figures.layer_params, layer_experts = figures.layer_experts;
  const FsdpCopyTimes copies = fsdp_copy_times(figures, stage, layers);
  FsdpStage fsdp;
  fsdp.layers = layers;
  fsdp.layer_forward = cost.layer.forward_with_comm + copies.layer_forward;
  fsdp.layer_backward = cost.layer.backward_with_comm + figures.layer_recompute + copies.layer_backward;
  fsdp.layer_gather = data_parallel_collective(figures, Collective::AllGather, layer_gather_width(figures),
                                               problem_.dtype, layer_params, layer_experts);
  const DType reduce = problem_.fsdp_reduce;
  const double reduce_width = static_cast<double>(dtype_size(reduce));
  fsdp.layer_reduce =
      data_parallel_collective(figures, Collective::ReduceScatter, reduce_width, reduce, layer_params, layer_experts);
  if (stage == 0) {
    fsdp.embedding_forward = cost.embedding.forward_with_comm;
    fsdp.embedding_backward = cost.embedding.backward_with_comm;
  }
  if (stage == figures.p - 1) {
    fsdp.head_forward = cost.head.forward_with_comm;
    fsdp.head_backward = cost.head.backward_with_comm + (figures.p == 1 ? cost.tied_gradient_sum : 0.0);
  }
  // The root unit's copies: its gathered parameters copied before the first compute, its gradients after the last.
  fsdp.embedding_forward += copies.root_forward;
  fsdp.embedding_backward += copies.root_backward;
  const double root_params = params - layers * layer_params;
  fsdp.root_gather =
      data_parallel_collective(figures, Collective::AllGather, figures.width, problem_.dtype, root_params);
  fsdp.root_reduce = data_parallel_collective(figures, Collective::ReduceScatter, reduce_width, reduce, root_params);
  return fsdp;
}

CostModel::StageTime CostModel::stage_time(const PlanFigures& figures, int stage, int layers, double p2p) {
  const Costs& cost = figures.cost;
  const SegmentCost& layer = cost.layer;
  const bool first = stage == 0, last = stage == figures.p - 1;
  StageTime st;
  double n = layers;
  double forward = n * layer.forward, backward = n * layer.backward;
  if (first) {
    forward += cost.embedding.forward;
    backward += cost.embedding.backward;
  }
  if (last) {
    forward += cost.head.forward;
    backward += cost.head.backward + (figures.p == 1 ? cost.tied_gradient_sum : 0.0);
  }
  st.compute = forward + backward;
  st.recompute = n * figures.layer_recompute;
  st.forward = forward;
  st.backward = backward + st.recompute;
  // Each dimension's communication, term by term innermost first (a sum's bits depend on its order); the
  // backward pass hides the reduction behind its layers' calls (not the embedding's and the head's).
  for (size_t position : innermost_) {
    const CommSeconds& in_layer = layer.comm[position];
    double& comm = st.comm.at(position);
    comm = n * (in_layer.forward + in_layer.backward);
    if (first) comm += cost.embedding.comm[position].forward + cost.embedding.comm[position].backward;
    if (last) comm += cost.head.comm[position].forward + cost.head.comm[position].backward;
    st.forward += n * in_layer.forward;
    st.backward += n * in_layer.backward;
  }
  if (pipeline_ != kNoRole) st.comm.at(pipeline_) += p2p;
  st.forward += p2p / 2;
  for (size_t position : innermost_) {
    if (first) st.forward += cost.embedding.comm[position].forward;
    if (last) st.forward += cost.head.comm[position].forward;
  }
  const FsdpCopyTimes copies = fsdp_copy_times(figures, stage, layers);
  st.fsdp_copies = copies.total(layers);
  st.forward += n * copies.layer_forward + copies.root_forward;
  st.backward += n * copies.layer_backward + copies.root_backward;
  const Overlap zero = exposed_zero_comm(figures, stage, layers, st);
  st.zero = zero.exposed;
  st.zero_slowdown = zero.slowdown;
  // Megatron-style runtimes add each micro-batch's weight gradient inside its GEMM (beta = 1): no pass of its own.
  st.accumulate = problem_.fused_accumulation
                      ? 0.0
                      : accumulate_seconds(sharded_params(figures, stage, layers, figures.zero >= 2), figures.m) /
                            figures.m;
  st.sum = st.compute + st.recompute;
  for (size_t position : innermost_) st.sum += st.comm.at(position);
  st.sum += st.zero;
  st.sum += st.zero_slowdown;
  st.sum += st.fsdp_copies;
  st.sum += st.accumulate;
  return st;
}

std::vector<CostModel::StageTime> CostModel::stage_times(const PlanFigures& figures, const std::vector<int>& layers) {
  double p2p = 0;
  if (figures.p > 1) {
    p2p = 2.0 * figures.v * pricer_.point_to_point(figures.cost.boundary_bytes, figures.p_stride);
  }
  std::vector<StageTime> stages;
  for (int stage = 0; stage < figures.p; ++stage) {
    stages.push_back(stage_time(figures, stage, layers[static_cast<size_t>(stage)], p2p));
  }
  return stages;
}

TimeBreakdown CostModel::pipeline_time(const PlanFigures& figures, const std::vector<StageTime>& stages,
                                       PipelineTiming timing) {
  size_t slowest = 0;
  double sum = 0;
  for (size_t i = 0; i < stages.size(); ++i) {
    sum += stages[i].total();
    if (stages[i].total() > stages[slowest].total()) slowest = i;
  }
  const StageTime& bottleneck = stages[slowest];
  const double m = figures.m, t_max = bottleneck.total();
  double pipeline = 0;
  if (timing == PipelineTiming::Replayed) {
    // Every action of every stage, a model chunk's forward and backward each 1/v of the stage's; the
    // transfers' time is already in the stages' (as the runtime's sends copy and its receives wait).
    PipelineTimes times;
    for (const StageTime& stage : stages) {
      times.forward.push_back(stage.forward / figures.v);
      times.backward.push_back((stage.total() - stage.forward) / figures.v);
    }
    const PipelineShape shape{figures.p, static_cast<int>(figures.m), figures.v,
                              static_cast<int>(figures.p * figures.v)};
    pipeline = simulate_pipeline(schedule_of(figures.schedule, shape), times).step_s;
  } else if (figures.schedule == PipelineSchedule::Interleaved) {
    pipeline = m * t_max + (sum - t_max) / figures.v;
  } else {
    pipeline = (m - 1) * t_max + sum;
  }
  TimeBreakdown time;
  time.compute = m * bottleneck.compute;
  time.recompute = m * bottleneck.recompute;
  for (size_t position = 0; position < DimensionDegrees::kCapacity; ++position) {
    time.comm.at(position) = m * bottleneck.comm.at(position);
  }
  time.zero_comm = m * bottleneck.zero;
  time.overlap_slowdown = m * bottleneck.zero_slowdown;
  time.fsdp_copies = m * bottleneck.fsdp_copies;
  time.grad_accumulation = m * bottleneck.accumulate;
  time.bubble = pipeline - m * t_max;
  return time;
}

CostModel::Overlap CostModel::stage_reduction(const PlanFigures& figures, int stage, int layers,
                                              const StageTime& time) {
  // Gradients in the order the backward pass finishes them, each with the time its segment's backward takes.
  struct Ready {
    double params;
    double seconds;
    double experts = 0;  // of the params, the experts' (ep > 1), reduced over dp alone in buckets of their own
  };
  std::vector<Ready> order;
  const Costs& cost = figures.cost;
  double ends = 0;
  if (stage == figures.p - 1) {
    order.push_back({figures.work.head.params + (figures.p > 1 ? figures.tied : 0.0), cost.head.backward});
    ends += cost.head.backward;
  }
  if (stage == 0) ends += cost.embedding.backward;
  const double per_layer = layers > 0 ? std::max(0.0, time.backward - ends) / layers : 0.0;
  for (int i = 0; i < layers; ++i) order.push_back({figures.layer_params, per_layer, figures.layer_experts});
  if (stage == 0) order.push_back({figures.work.embedding.params, cost.embedding.backward});

  // Buckets fill in that order; each collective starts when its bucket is complete and the one before is done.
  const Collective op = figures.zero == 0 ? Collective::AllReduce : Collective::ReduceScatter;
  const double bucket_params = problem_.bucket_bytes / kF32;
  double clock = 0, comm_end = 0, filled = 0, experts_filled = 0, busy = 0;
  auto launch = [&](double& bucket, int ranks, int stride) {
    double seconds = ranks > 1 ? pricer_.collective(op, kF32 * bucket, ranks, stride, DType::F32) : 0.0;
    comm_end = std::max(comm_end, clock) + seconds;
    busy += seconds;
    bucket = 0;
  };
  auto launch_dense = [&] { launch(filled, figures.d, figures.d_stride); };
  auto launch_experts = [&] { launch(experts_filled, figures.expert_d, figures.expert_d_stride); };
  for (const Ready& segment : order) {
    clock += segment.seconds;
    filled += segment.params - segment.experts;
    experts_filled += segment.experts;
    if (filled >= bucket_params) launch_dense();
    if (experts_filled >= bucket_params) launch_experts();
  }
  if (filled > 0) launch_dense();
  if (experts_filled > 0) launch_experts();
  Overlap overlap;
  overlap.exposed = std::max(0.0, comm_end - clock);
  overlap.slowdown = problem_.cluster.device.comm_compute_slowdown * std::max(0.0, busy - overlap.exposed);
  return overlap;
}

CostModel::Overlap CostModel::data_parallel_comm(const PlanFigures& figures, const std::vector<int>& layers,
                                                 const std::vector<StageTime>& stages) {
  Overlap result;
  // Each stage reduces beside its last backward pass; earlier stages finish that pass later (the
  // pipeline drains towards the first), which hides more of what the later stages expose.
  if (figures.d > 1 && figures.zero <= 1) {
    double drain = 0;
    for (int stage = figures.p - 1; stage >= 0; --stage) {
      const StageTime& st = stages[static_cast<size_t>(stage)];
      Overlap own = stage_reduction(figures, stage, layers[static_cast<size_t>(stage)], st);
      if (own.exposed + own.slowdown - drain > result.exposed + result.slowdown) {
        result.exposed = std::max(0.0, own.exposed - drain);
        result.slowdown = own.slowdown;
      }
      drain += st.backward;
    }
  }
  if (figures.p > 1) {  // the tied embedding's two copies exchange gradients
    result.exposed +=
        pricer_.collective(Collective::AllReduce, kF32 * figures.tied, 2, figures.p_stride * (figures.p - 1));
  }
  return result;
}

double CostModel::slowest_optimizer(const PlanFigures& figures, const std::vector<int>& layers) const {
  double seconds = 0;
  for (int stage = 0; stage < figures.p; ++stage) {
    const int n = layers[static_cast<size_t>(stage)];
    seconds = std::max(seconds, optimizer_seconds(sharded_params(figures, stage, n, figures.zero >= 1),
                                                  sharded_params(figures, stage, n, figures.zero >= 2)));
  }
  return seconds;
}

double CostModel::slowest_param_gather(const PlanFigures& figures, const std::vector<int>& layers) {
  if (figures.d == 1 || (figures.zero != 1 && figures.zero != 2)) return 0.0;
  double seconds = 0;
  for (int stage = 0; stage < figures.p; ++stage) {
    const int n = layers[static_cast<size_t>(stage)];
    seconds = std::max(seconds, bucketed(figures, Collective::AllGather, figures.width, problem_.dtype, n,
                                         stage_params(figures, stage, n), layer_gather_width(figures)));
  }
  return seconds;
}

void CostModel::add_rates(Prediction& prediction) const {
  prediction.step_s = prediction.time.total();
  prediction.tokens_per_s = static_cast<double>(problem_.global_batch * problem_.seq) / prediction.step_s;
  double peak = problem_.cluster.device.performance(problem_.dtype).matrix_flops * problem_.cluster.devices();
  prediction.mfu = model_flops_per_step_ / (prediction.step_s * peak);
  double recomputed_per_row = prediction.plan.recompute == RecomputeMode::Full        ? full_flops_per_row_
                              : prediction.plan.recompute == RecomputeMode::Selective ? selective_flops_per_row_
                                                                                  : 0.0;
  prediction.hardware_flops = model_flops_per_step_ + recomputed_per_row * static_cast<double>(problem_.global_batch);
}

CostModel::StepAttribution CostModel::attribute(const Prediction& prediction) {
  const ParallelPlan& plan = prediction.plan;
  const PlanFigures figures = plan_figures(plan);
  const std::vector<StageTime> stages = stage_times(figures, prediction.layers_per_stage);
  StepAttribution result;
  for (size_t i = 0; i < stages.size(); ++i) {
    if (stages[i].total() > stages[static_cast<size_t>(result.stage)].total()) result.stage = static_cast<int>(i);
  }
  const int stage = result.stage;
  const double layers = prediction.layers_per_stage.at(static_cast<size_t>(stage));
  const int ep = role_degree(plan, expert_);
  const int split = sequence_split(plan);
  auto add = [&](const std::vector<OpWork>& ops, double times, bool recomputed_only) {
    for (const OpWork& op : ops) {
      if (recomputed_only && !op.selective_recompute) continue;
      ClassTime& entry = is_expert_gemm(op) ? result.expert_gemms : op.fp8 ? result.fp8_gemms : result.compute[op.kind];
      ClassTime& by_op = result.compute_by_op[op.op];
      const double seconds = times * op_time(op, split, ep);
      const double flops = times * op.flops * (op.residual_stream ? 1.0 / split : 1.0);
      entry.seconds += seconds;
      entry.flops += flops;
      by_op.seconds += seconds;
      by_op.flops += flops;
    }
  };
  const Workload& work = figures.work;
  const double m = figures.m;
  add(work.layer.forward, m * layers, false);
  add(work.layer.backward, m * layers, false);
  if (plan.recompute != RecomputeMode::None) {
    add(work.layer.forward, m * layers, plan.recompute == RecomputeMode::Selective);
  }
  if (stage == 0) {
    add(work.embedding.forward, m, false);
    add(work.embedding.backward, m, false);
  }
  if (stage == figures.p - 1) {
    add(work.head.forward, m, false);
    add(work.head.backward, m, false);
    if (figures.p == 1 && work.tied_gradient_sum.flops > 0) add({work.tied_gradient_sum}, m, false);
  }
  for (const OpWork& op : work.layer.forward) {
    if (!is_expert_gemm(op)) continue;
    const ExpertLoad load = expert_load(ep);
    result.expert_rows = static_cast<double>(busiest_expert_gemm(op, load, problem_.dtype).gemm.m);
  }
  result.experts_per_device = problem_.model.num_experts / ep;
  attribute_comm(prediction, figures, result);
  return result;
}

void CostModel::attribute_comm(const Prediction& prediction, const PlanFigures& figures,
                               StepAttribution& attribution) {
  const ParallelPlan& plan = prediction.plan;
  const int stage = attribution.stage;
  const double layers = prediction.layers_per_stage.at(static_cast<size_t>(stage));
  const ModelComm& graph =
      comm_of(plan.micro_batch, device_seq(plan), role_degree(plan, tensor_), sequence_split(plan) > 1);
  int stride = 1;
  for (size_t position : innermost_) {
    const int degree = plan.degrees.at(position);
    const PlannerDimension* part = comm_parts_[position];
    if (part != nullptr && part->explain_comm) {
      const CommInput input = comm_input(plan, degree, stride, graph, figures.work);
      const Costs& cost = figures.cost;
      const MicroBatchComm priced{cost.embedding.comm[position], cost.layer.comm[position], cost.head.comm[position]};
      for (ExplainTerm& term : part->explain_comm({input, priced, layers, stage == 0, stage == figures.p - 1})) {
        attribution.comm.push_back(std::move(term));
      }
    } else if (const double seconds = prediction.time.comm.at(position); seconds > 0) {
      attribution.comm.push_back({part_at(position).comm_name, seconds, ""});
    }
    stride *= degree;
  }
  attribution.reduction = {fmt::format("{}-parallel reduction exposed", part_at(reduction_).parallelism),
                           prediction.time.reduction.at(reduction_), "past the last backward pass"};
}

double CostModel::StepAttribution::comm_seconds(std::string_view name) const {
  for (const ExplainTerm& term : comm) {
    if (term.name == name) return term.seconds;
  }
  return 0.0;
}

const PlannerDimension& CostModel::part_at(size_t position) const {
  for (const PlannerDimension& part : dimensions_) {
    if (dimension_position(part.name) == position) return part;
  }
  fail("no planner dimension at position {}", position);
}

MemoryBreakdown CostModel::Placement::highest() const { return highest_peak(stages); }

CostModel::Placement CostModel::place(const ParallelPlan& plan) {
  if (auto why = invalid_reason(plan)) fail("plan {} is invalid: {}", plan.describe(), *why);
  const PlanFigures figures = plan_figures(plan);
  Placement placement;
  if (problem_.even_stage_layers) {
    placement.layers.assign(static_cast<size_t>(figures.p), static_cast<int>(problem_.model.n_layer) / figures.p);
    placement.stages = memory_per_stage(figures, placement.layers);
    return placement;
  }
  placement.layers = split_layers_by_time(figures);
  placement.stages = memory_per_stage(figures, placement.layers);
  rebalance_by_memory(figures, placement.layers, placement.stages);
  return placement;
}

Prediction CostModel::evaluate(const ParallelPlan& plan, PipelineTiming timing) {
  return evaluate(plan, place(plan), timing);
}

Prediction CostModel::evaluate(const ParallelPlan& plan, Placement placement, PipelineTiming timing) {
  const PlanFigures figures = plan_figures(plan);
  std::vector<int>& layers = placement.layers;
  std::vector<StageTime> stages = stage_times(figures, layers);

  Prediction prediction;
  prediction.plan = plan;
  prediction.time = pipeline_time(figures, stages, timing);
  prediction.schedule_replayed = timing == PipelineTiming::Replayed;
  const Overlap reduction = data_parallel_comm(figures, layers, stages);
  prediction.time.reduction.at(reduction_) = reduction.exposed;
  prediction.time.overlap_slowdown += reduction.slowdown;
  prediction.time.optimizer = slowest_optimizer(figures, layers);
  prediction.time.param_gather = slowest_param_gather(figures, layers);
  add_rates(prediction);
  prediction.memory = placement.highest();
  prediction.layers_per_stage = std::move(layers);
  prediction.stages = std::move(placement.stages);
  return prediction;
}

}  // namespace strata
