// strata plan MODEL CLUSTER: the ranked parallel plans for a model on a
// cluster, with the predicted step time, throughput, MFU and memory, why the
// runners-up lose and why regions were rejected (planner/search.h).
#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <optional>

#include "cli/commands.h"
#include "core/error.h"
#include "planner/auto_plan.h"
#include "planner/explain.h"
#include "planner/model_spec.h"
#include "planner/plan_dimension.h"
#include "planner/report.h"

namespace strata::cli {

namespace {

struct PlanArgs {
  std::string model;
  std::string cluster;
  int64_t global_batch = 0;
  int64_t seq = 0;
  std::string dtype;
  size_t top = 10;
  bool json = false;
  bool explain = false;
  int nodes = 0;
  int threads = 0;
  int devices = 0;
  // Per dimension (by name), the degree fixed and the largest one searched (0: open).
  std::map<std::string, int> fixed, largest;
  std::map<std::string, std::string> options;  // per option flag of a dimension (by its name), the value given
  int zero = -1;
  double moe_imbalance = 1.0;
  double figure_uncertainty = 0.1;
  int64_t micro_batch = 0, max_micro_batch = 32;
  std::string recompute;
  std::string attention = "fused";
  std::string attention_library;
  double bucket_mb = 25;
  std::string accumulate = "separate";
  std::string embedding_grad_add = "off";
  std::string clip = "fused";
  std::string selective = "attention";
  std::string dropout = "off";
  std::string eager = "off";
  std::string rope = "fused";
  std::string qk_norm = "off";
  std::string kv_repeat = "off";
  std::string final_norm = "fused";
  std::string tp_input = "per-linear";
  std::string tp_overlap = "none";
  std::string ub_comm_sms;
  std::string fsdp = "none";
  std::string fsdp_reduce = "f32";
  std::string loss = "fused";
  std::string cp_merge = "none";
  std::string stage_layers = "balanced";
  std::string fp8 = "none";
  std::string fp8_gather = "off";
};

// Which of a two-way flag's values was given: true for `second`; anything else is an error naming the flag.
bool second_of(const std::string& value, const char* flag, const char* first, const char* second) {
  if (value != first && value != second) fail("{} must be {} or {}, got '{}'", flag, first, second, value);
  return value == second;
}

PlanLimits limits_of(const PlanArgs& args) {
  PlanLimits limits;
  for (const auto& [dimension, degree] : args.fixed) limits.fixed.set(dimension, degree);
  for (const auto& [dimension, degree] : args.largest) limits.largest.set(dimension, degree);
  for (const PlannerDimension& part : planner_dimensions()) {
    for (const OptionFlag& flag : part.option_flags) {
      const auto given = args.options.find(flag.name);
      if (given != args.options.end() && !given->second.empty()) flag.fix(given->second, limits);
    }
  }
  if (args.zero >= 0) limits.zero = args.zero;
  if (args.micro_batch > 0) limits.micro_batch = args.micro_batch;
  limits.max_micro_batch = args.max_micro_batch;
  if (!args.recompute.empty()) limits.recompute = parse_recompute_mode(args.recompute, "--recompute");
  return limits;
}

void plan(const PlanArgs& args) {
  ModelSpec model = load_model_spec(args.model);
  ClusterSpec cluster = resolve_cluster(args.cluster, args.threads, args.devices);
  if (args.nodes > 0) {
    cluster.nodes = args.nodes;
    cluster.validate();
  }
  int64_t global_batch = args.global_batch > 0 ? args.global_batch : model.global_batch;
  if (global_batch <= 0) fail("{} suggests no global batch; give --global-batch", model.name);
  DType dtype = DType::F32;
  if (!args.dtype.empty()) {
    dtype = parse_dtype(args.dtype);
  } else if (cluster.device.computes(DType::BF16)) {
    dtype = DType::BF16;
  }
  PlanningProblem problem{model.name, model.config, global_batch, args.seq > 0 ? args.seq : model.config.block_size,
                          dtype, cluster};
  problem.attention = parse_attention_kernel(args.attention, "--attention");
  problem.attention_library = args.attention_library;
  problem.bucket_bytes = args.bucket_mb * 1024 * 1024;
  problem.fused_accumulation = second_of(args.accumulate, "--accumulate", "separate", "fused");
  problem.embedding_grad_add = !second_of(args.embedding_grad_add, "--embedding-grad-add", "on", "off");
  problem.separate_clip = !second_of(args.clip, "--clip", "separate", "fused");
  problem.selective = parse_selective_policy(args.selective, "--selective");
  problem.dropout = !second_of(args.dropout, "--dropout", "on", "off");
  problem.eager = !second_of(args.eager, "--eager", "on", "off");
  problem.complex_rope = second_of(args.rope, "--rope", "fused", "complex-eager");
  problem.qk_norm = !second_of(args.qk_norm, "--qk-norm", "on", "off");
  problem.kv_repeat = !second_of(args.kv_repeat, "--kv-repeat", "on", "off");
  problem.final_norm =
      second_of(args.final_norm, "--final-norm", "fused", "olmo-eager") ? FinalNorm::OlmoEager : FinalNorm::Fused;
  problem.tp_input = second_of(args.tp_input, "--tp-input", "per-linear", "shared") ? TensorParallelInput::Shared
                                                                                    : TensorParallelInput::PerLinear;
  problem.tp_overlap = parse_tp_overlap(args.tp_overlap, args.ub_comm_sms);
  problem.fsdp = parse_fsdp_runtime(args.fsdp, "--fsdp");
  problem.fsdp_reduce = parse_dtype(args.fsdp_reduce);
  problem.loss = parse_loss_kernel(args.loss, "--loss");
  problem.ring_merge = parse_ring_merge(args.cp_merge, "--cp-merge");
  problem.even_stage_layers = second_of(args.stage_layers, "--stage-layers", "balanced", "even");
  problem.fp8 = parse_fp8_recipe(args.fp8, "--fp8");
  problem.fp8_gather = !second_of(args.fp8_gather, "--fp8-gather", "on", "off");
  problem.moe_imbalance = args.moe_imbalance;
  CostModel cost(std::move(problem));
  SearchResult result = search_plans(cost, limits_of(args), std::max<size_t>(args.top, args.explain ? 2 : 1));
  std::optional<Explanation> explanation;
  if (args.explain && !result.ranked.empty()) {
    explanation = explain_plans(cost, result.ranked[0], result.ranked.size() > 1 ? &result.ranked[1] : nullptr);
  }
  const std::vector<Prediction> shown(result.ranked.begin(),
                                      result.ranked.begin() + static_cast<std::ptrdiff_t>(
                                                                  std::min(args.top, result.ranked.size())));
  const StepIntervals intervals = step_intervals(cost, shown, args.figure_uncertainty);
  if (args.json) {
    nlohmann::json report = report_json(cost, result, args.top, &intervals);
    if (explanation) report["explain"] = explanation_json(*explanation);
    fmt::print("{}\n", report.dump(2));
  } else {
    fmt::print("{}", format_report(cost, result, args.top, &intervals));
    if (explanation) fmt::print("{}", format_explanation(*explanation));
  }
}

// --<dimension>, --max-<dimension> and the options' flags of every dimension the planner searches (plan_dimension.h).
void add_dimension_flags(CLI::App& command, PlanArgs& args) {
  std::vector<PlannerDimension> parts = planner_dimensions();
  std::sort(parts.begin(), parts.end(), [](const PlannerDimension& a, const PlannerDimension& b) {
    return dimension_position(a.name) < dimension_position(b.name);  // as a plan names them
  });
  for (const PlannerDimension& part : parts) {
    if (part.fix_help.empty()) continue;
    command.add_option("--" + part.name, args.fixed[part.name], part.fix_help)->check(CLI::PositiveNumber);
  }
  for (const PlannerDimension& part : parts) {
    if (part.bound_help.empty()) continue;
    command.add_option("--max-" + part.name, args.largest[part.name], part.bound_help)->check(CLI::PositiveNumber);
  }
  for (const PlannerDimension& part : parts) {
    for (const OptionFlag& flag : part.option_flags) {
      command.add_option("--" + flag.name, args.options[flag.name], flag.help);
    }
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto* command = app.add_subcommand("plan", "Choose the parallel layout of a model on a cluster, and explain why");
  auto args = std::make_shared<PlanArgs>();
  command->add_option("model", args->model,
                      "Preset (gpt2-small ... gpt-1t, smollm-135m, llama2-7b, llama3-8b), a TOML file with a [model] "
                      "table, or a HuggingFace model directory")
      ->required();
  command
      ->add_option("cluster", args->cluster,
                   "Cluster TOML, a preset in configs/clusters (dgx-a100-80gb, dgx-h100, ascend-910b, "
                   "this-machine) or the cluster file `strata calibrate` writes")
      ->required();
  command->add_option("--global-batch", args->global_batch, "Rows per optimizer step (default: the model's)");
  command->add_option("--seq", args->seq, "Tokens per row (default: model.block_size)");
  command->add_option("--dtype", args->dtype, "Compute dtype (default: bf16 when the device has it, else f32)");
  command->add_option("--top", args->top, "Plans to list")->check(CLI::PositiveNumber);
  command->add_flag("--json", args->json, "Print JSON instead of a table");
  command->add_flag("--explain", args->explain,
                    "For the winner and the runner-up, every term of the step time, and the cluster figures the "
                    "answer is most sensitive to");
  command
      ->add_option("--figure-uncertainty", args->figure_uncertainty,
                   "How far each assumed figure of the cluster description may be off, as a fraction (default 0.1): "
                   "every plan's step time gets the interval from each such figure this much worse and better, the "
                   "changes added; measured (fitted, calibrated) and datasheet figures are held")
      ->check(CLI::Range(0.0, 0.99));
  command->add_option("--nodes", args->nodes, "Override the cluster's node count")->check(CLI::PositiveNumber);
  command->add_option("--threads", args->threads, "Threads per process (calibrated cluster files only)")->check(CLI::PositiveNumber);
  command->add_option("--devices", args->devices, "Processes on this machine (calibrated cluster files only)")
      ->check(CLI::PositiveNumber);
  add_dimension_flags(*command, *args);
  command->add_option("--moe-imbalance", args->moe_imbalance,
                      "A mixture of experts' routing imbalance: the busiest expert's tokens over the mean (default 1, "
                      "perfectly balanced; 1.2 means one expert gets 20% more than its share). Every rank's grouped "
                      "GEMMs are priced at that expert's rows, since a step waits for its slowest rank");
  command->add_option("--micro-batch", args->micro_batch, "Fix the rows per micro-batch")->check(CLI::PositiveNumber);
  command->add_option("--max-micro-batch", args->max_micro_batch, "Largest micro-batch searched")
      ->check(CLI::PositiveNumber);
  command->add_option("--zero", args->zero, "Fix the ZeRO stage (0-3)")->check(CLI::Range(0, 3));
  command->add_option("--recompute", args->recompute, "Fix recomputation: none, selective or full");
  command->add_option("--attention", args->attention,
                      "How attention runs: fused (one flash-style kernel, as Strata's) or unfused (Megatron's batched "
                      "GEMMs and softmax, the scores in memory)");
  command->add_option("--attention-library", args->attention_library,
                      "The library whose fused attention the run calls, one the cluster file describes under "
                      "[device.<dtype>.attention_libraries] (e.g. flash-triton: FlashAttention in Triton, as "
                      "llm-foundry's attn_impl = triton); default: the device's own fused engine");
  command->add_option("--bucket-mb", args->bucket_mb, "MiB of gradients per data-parallel collective (parallel.bucket_mb)")
      ->check(CLI::PositiveNumber);
  command->add_option("--accumulate", args->accumulate,
                      "How micro-batch gradients are summed: separate (a pass after each, as Strata's trainer) or "
                      "fused (inside the weight-gradient GEMMs, as Megatron)");
  command->add_option("--embedding-grad-add", args->embedding_grad_add,
                      "on: with --accumulate fused, the embedding's gradient (a lookup's, in no GEMM) is still added "
                      "into the optimizer's fp32 gradient buffer after every micro-batch, as NeMo's distributed Adam "
                      "does (priced as that pass's memory traffic); off (default): nothing beyond the accumulation");
  command->add_option("--clip", args->clip,
                      "How clipping scales the gradients: fused (inside AdamW, as Strata's trainer) or separate (a "
                      "pass of its own, as PyTorch's clip_grad_norm_ and Megatron)");
  command->add_option("--selective", args->selective,
                      "What selective recomputation redoes: attention (the attention core, as Strata's trainer and "
                      "Megatron) or alternate-gemms (all but attention and every other GEMM, torchtitan's per-op "
                      "policy)");
  command->add_option("--dropout", args->dropout,
                      "on: the run drops out attention probabilities and residual branches as Megatron-LM does "
                      "(priced as their memory traffic); off (default): none, as Strata's trainer");
  command->add_option("--eager", args->eager,
                      "on: the run is eager PyTorch on torchtitan's Llama, whose RMSNorm, rotary embedding and SwiGLU "
                      "run op by op (priced as the extra memory traffic); off (default): one fused kernel each, as "
                      "Strata's graph and torch.compile");
  command->add_option("--rope", args->rope,
                      "complex-eager: the rotary embedding is torchtitan's complex arithmetic under torch.compile, "
                      "which Inductor leaves to eager kernels (priced as the casts' and complex product's extra "
                      "memory traffic; already in --eager on); fused (default): one kernel, as Strata's graph");
  command->add_option("--qk-norm", args->qk_norm,
                      "on: the model normalises all of q and all of k after their projections, as OLMo 2 does (two "
                      "more RMSNorms a layer, priced as the layer's own); off (default): none, as Strata's Llama");
  command->add_option("--kv-repeat", args->kv_repeat,
                      "on: grouped-query attention runs through an SDPA without GQA, k and v expanded to every query "
                      "head first, as OLMo-core's compiled Attention and torchtitan's Llama do (priced as the "
                      "expansion's memory traffic, copies of their own under --eager on); off (default): one grouped "
                      "kernel, as Strata's graph");
  command->add_option("--final-norm", args->final_norm,
                      "fused (default): the model's final norm is one kernel, as Strata's graph; olmo-eager: "
                      "OLMo-core's RMSNorm outside torch.compile, op by op in fp32 (priced as the extra memory "
                      "traffic)");
  command->add_option("--tp-input", args->tp_input,
                      "How linears that read one value enter the tensor-parallel region: per-linear (default, as "
                      "Strata's runtime: a collective each) or shared (one, as Megatron-LM and torchtitan)");
  command->add_option("--tp-overlap", args->tp_overlap,
                      "Sequence parallelism's all-gathers and reduce-scatters run chunk by chunk beside the layer's "
                      "GEMMs: userbuffers (Transformer Engine's ub_tp_comm_overlap), async-tp (PyTorch's "
                      "micro-pipelined tensor parallelism) or none (default: exposed, as Strata's runtime)");
  command->add_option("--ub-comm-sms", args->ub_comm_sms,
                      "Userbuffers' SMs per overlap, as the run's ub config gives them: GEMM=N,... with GEMM one of "
                      "qkv_fprop, proj_fprop, fc1_fprop, fc2_fprop, proj_dgrad, fc2_dgrad, qkv_wgrad, fc1_wgrad "
                      "(default: Transformer Engine's, 1 for ring exchange, 16 else)");
  command->add_option("--fsdp", args->fsdp,
                      "The FSDP a ZeRO-3 run uses, whose copies around its collectives (casts of the shards, the "
                      "gathered units and the gradients copied) each unit pays per micro-batch: 1 "
                      "(FullyShardedDataParallel's FlatParameter, as Composer), 2 (fully_shard, as torchtitan) or none "
                      "(default: the collectives only)");
  command->add_option("--fsdp-reduce", args->fsdp_reduce,
                      "The dtype a ZeRO-3 run reduce-scatters its gradients in: f32 (default, as torchtitan and "
                      "Composer's DEFAULT mixed precision) or the compute dtype (bf16, as Composer's PURE)");
  command->add_option("--loss", args->loss,
                      "How the run computes the loss: fused (default: one kernel over the logits, as Strata's), "
                      "eager-f32 (the logits cast to fp32, then PyTorch's log_softmax and nll_loss op by op, as "
                      "torchtitan), eager-f32-zloss (the logits cast to fp32 and their shifted rows copied, then "
                      "cross-entropy and z-loss's logsumexp op by op, as OLMo-core without fused_loss), triton-f32 "
                      "(cast and copied so, then one Triton kernel each way, as OLMo-core's fused_loss), "
                      "megatron-f32 (Megatron's vocabulary-parallel cross-entropy on the logits cast to fp32, op by "
                      "op) or megatron-f32-fused (the same with cross_entropy_loss_fusion: four compiled functions)");
  command->add_option("--stage-layers", args->stage_layers,
                      "How the layers are split over pipeline stages: balanced (default: the split that evens the "
                      "stages' time, the embedding on the first and the head on the last, then their memory) or even "
                      "(as many on every stage and virtual stage, as Megatron splits them)");
  command->add_option("--cp-merge", args->cp_merge,
                      "How the runtime merges context parallelism's ring steps, priced as the traffic of its "
                      "element-wise kernels: te (Transformer Engine's P2P ring: each step's output corrected and "
                      "added, dQ and dK/dV added, as Megatron-Core), torch (PyTorch's context_parallel: outputs "
                      "merged and gradients accumulated in fp32, as torchtitan, eager), torch-compiled (the same traced "
                      "by torch.compile, each step's element-wise work one kernel) or none (default: not priced)");
  command->add_option("--fp8", args->fp8,
                      "Float8 linears: the layers' linears (forward, input and weight gradients) on the device's "
                      "[device.fp8] engine, attention and the output head in the compute dtype, with the casts of "
                      "the scaling recipe: delayed (Transformer Engine's, amax history: one cast-transpose per "
                      "tensor, weights cast once per step), tensorwise (torchao's dynamic scaling: an amax pass, "
                      "then the cast, weights every forward) or none (default)");
  command->add_option("--fp8-gather", args->fp8_gather,
                      "on: the float8 linears' weights are all-gathered in fp8 (torchao's "
                      "enable_fsdp_float8_all_gather, Transformer Engine's fp8 parameters under a distributed "
                      "optimizer): ZeRO's weight gathers move one byte for each; off (default)");
  command->callback([args] { plan(*args); });
}

}  // namespace strata::cli
