#include "train/auto_parallel.h"

#include <fmt/core.h>

namespace strata {

AppliedPlan apply_auto_plan(TrainConfig& config, int ranks, int threads_per_rank) {
  AutoPlanRequest request;
  request.model_name = "config";
  request.model = config.model;
  request.global_batch = config.global_batch;
  request.seq = config.model.block_size;
  // A calibrated profile is this machine as `ranks` processes of threads_per_rank threads.
  bool profile = find_cluster_file(config.cluster).extension() == ".json";
  request.cluster = resolve_cluster(config.cluster, profile ? threads_per_rank : 0, /*devices=*/ranks);
  request.cluster.nodes = 1;  // the run occupies `ranks` devices of one node of the described cluster
  request.cluster.devices_per_node = ranks;
  // The planner chooses among the layouts the runtime executes.
  request.limits.dp = ranks;
  request.limits.tp = 1;
  request.limits.pp = 1;
  request.limits.zero = 0;
  request.limits.recompute = RecomputeMode::None;
  request.limits.max_micro_batch = config.global_batch / ranks;
  AutoPlan plan = auto_plan(request);
  config.batch_size = plan.chosen.plan.micro_batch;
  config.validate();
  std::string summary = fmt::format("parallel.plan = auto on {}: {} (predicted {:.3f} s/step, {:.0f} tokens/s)\n",
                                    request.cluster.name, plan.chosen.plan.describe(), plan.chosen.step_s,
                                    plan.chosen.tokens_per_s);
  return {std::move(plan), std::move(summary)};
}

}  // namespace strata
