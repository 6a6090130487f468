#pragma once
// The plan a run records in plan.json. `parallel.plan = "auto"`: asks the planner for the best layout of this job
// on the configured hardware, within what the runtime executes for the ranks
// it was launched with (data parallelism over all of them, no ZeRO, no
// recomputation: the planner chooses the micro-batch), and applies it.
#include <filesystem>

#include "planner/auto_plan.h"
#include "train/config.h"

namespace strata {

struct AppliedPlan {
  AutoPlan plan;
  std::string summary;  // the start-up line: the chosen plan and its prediction
};

// Chooses the plan for `ranks` data-parallel ranks of `threads_per_rank`
// threads (0: as the profile was measured) on one host and sets
// config.batch_size to its micro-batch.
AppliedPlan apply_auto_plan(TrainConfig& config, int ranks, int threads_per_rank);
// The layout the config fixes (`parallel.plan = "manual"`) for `ranks` ranks,
// with the planner's prediction when parallel.cluster names the hardware.
AppliedPlan describe_manual_plan(const TrainConfig& config, int ranks, int threads_per_rank);

}  // namespace strata
