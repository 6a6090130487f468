#include "train/auto_parallel.h"

#include <fmt/core.h>

namespace strata {

AutoPlan apply_auto_plan(TrainConfig& config) {
  AutoPlanRequest request;
  request.model_name = "config";
  request.model = config.model;
  request.global_batch = config.global_batch;
  request.seq = config.model.block_size;
  // A calibrated profile is this machine as one process of ops.threads threads.
  bool profile = find_cluster_file(config.cluster).extension() == ".json";
  request.cluster = resolve_cluster(config.cluster, profile ? static_cast<int>(config.threads) : 0, /*devices=*/1);
  request.cluster.nodes = 1;  // the run occupies one device of the described cluster
  request.cluster.devices_per_node = 1;
  // The trainer runs one process without recomputation today: the planner
  // chooses among the layouts it can execute.
  request.limits.dp = 1;
  request.limits.tp = 1;
  request.limits.pp = 1;
  request.limits.zero = 0;
  request.limits.recompute = RecomputeMode::None;
  request.limits.max_micro_batch = config.global_batch;
  AutoPlan plan = auto_plan(request);
  config.batch_size = plan.chosen.plan.micro_batch;
  config.validate();
  fmt::print("parallel.plan = auto on {}: {} (predicted {:.3f} s/step, {:.0f} tokens/s)\n", request.cluster.name,
             plan.chosen.plan.describe(), plan.chosen.step_s, plan.chosen.tokens_per_s);
  return plan;
}

}  // namespace strata
