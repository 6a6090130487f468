#include "train/auto_parallel.h"

#include <fmt/core.h>

#include <algorithm>
#include <thread>

#include "core/error.h"
#include "planner/plan_settings.h"
#include "planner/report.h"

namespace strata {

namespace {

// This job on `ranks` devices of one node of parallel.cluster.
AutoPlanRequest plan_request(const TrainConfig& config, int ranks, int threads_per_rank) {
  AutoPlanRequest request;
  request.model_name = "config";
  request.model = config.model;
  request.global_batch = config.global_batch;
  request.seq = config.model.block_size;
  request.cluster = resolve_cluster_for_job(config.cluster, threads_per_rank, ranks);
  request.cluster.nodes = 1;
  request.cluster.devices_per_node = ranks;
  return request;
}

}  // namespace

int threads_per_rank(const TrainConfig& config, int ranks_on_this_host) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // OpenMP makes every thread up front: an absurd count crashes it, well before any use.
  constexpr int kThreadsPerCore = 4;
  if (config.threads > int64_t{kThreadsPerCore} * cores) {
    fail("key 'ops.threads' is {} but this machine has {} cores: use at most {} (0 shares the cores among the "
         "ranks)",
         config.threads, cores, kThreadsPerCore * cores);
  }
  if (config.threads > 0) return static_cast<int>(config.threads);
  return std::max(1, cores / ranks_on_this_host);
}

void choose_auto_layout(TrainConfig& config, int ranks, int threads_per_rank) {
  AutoPlanRequest request = plan_request(config, ranks, threads_per_rank);
  request.limits.zero = static_cast<int>(config.zero);
  request.limits.recompute = RecomputeMode::None;
  request.limits.max_micro_batch = config.global_batch;
  const ParallelPlan plan = auto_plan(request).chosen.plan;
  write_plan_settings(plan, config);
  config.validate();
}

AppliedPlan apply_auto_plan(TrainConfig& config, const MeshShape& mesh, int threads_per_rank) {
  AutoPlanRequest request = plan_request(config, mesh.size(), threads_per_rank);
  // The planner chooses the micro-batch on the mesh launched, at the configured ZeRO stage.
  fix_to_settings(config, mesh, request.limits);
  request.limits.zero = static_cast<int>(config.zero);
  request.limits.recompute = RecomputeMode::None;
  request.limits.max_micro_batch = config.global_batch / request.limits.fixed.batch_replicas();
  AutoPlan plan = auto_plan(request);
  config.batch_size = plan.chosen.plan.micro_batch;
  config.validate();
  std::string summary = fmt::format("parallel.plan = auto on {}: {} (predicted {:.3f} s/step, {:.0f} tokens/s)\n",
                                    request.cluster.name, plan.chosen.plan.describe(), plan.chosen.step_s,
                                    plan.chosen.tokens_per_s);
  return {std::move(plan), std::move(summary)};
}

AppliedPlan describe_manual_plan(const TrainConfig& config, const MeshShape& mesh, int threads_per_rank) {
  ParallelPlan plan = plan_of_settings(config, mesh);
  plan.micro_batch = config.batch_size;
  plan.micro_batches = config.accumulation_steps() / plan.degrees.batch_replicas();
  plan.zero = static_cast<int>(config.zero);
  plan.recompute = parse_recompute_mode(config.recompute, "train.recompute");
  if (config.cluster.empty()) {
    AutoPlan unpredicted;
    unpredicted.chosen.plan = plan;
    unpredicted.record = {{"mode", "manual"},
                          {"chosen", {{"plan", plan_json(plan)}}},
                          {"prediction", "none: set parallel.cluster to a cluster file (a preset, or the one `strata calibrate` writes)"}};
    return {std::move(unpredicted), fmt::format("plan: {} (no prediction: parallel.cluster is not set)\n",
                                                plan.describe())};
  }
  AutoPlanRequest request = plan_request(config, mesh.size(), threads_per_rank);
  AutoPlan predicted = predict_plan(request, plan);
  std::string summary = fmt::format("plan: {} (predicted on {}: {:.3f} s/step, {:.1f} MiB per rank)\n", plan.describe(),
                                    request.cluster.name, predicted.chosen.step_s,
                                    predicted.chosen.memory.peak / (1 << 20));
  return {std::move(predicted), std::move(summary)};
}

PeakFlops peak_flops(const TrainConfig& config, int ranks, int threads_per_rank) {
  if (config.cluster.empty()) return {};
  const DType dtype = config.precision_policy().low;
  try {
    ClusterSpec cluster = resolve_cluster_for_job(config.cluster, threads_per_rank, ranks);
    return {cluster.device.performance(dtype).matrix_flops * ranks,
            fmt::format("{} {} peak of {} device(s)", cluster.name, dtype_name(dtype), ranks)};
  } catch (const Error&) {
    return {};  // no figures for this dtype: utilisation is not reported
  }
}

}  // namespace strata
