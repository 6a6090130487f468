#pragma once
// `parallel.plan = "auto"`: asks the planner for the best layout of this job
// on the configured hardware, within what the trainer can execute (one
// process for now), and applies it to the configuration.
#include <filesystem>

#include "planner/auto_plan.h"
#include "train/config.h"

namespace strata {

// Chooses the plan and sets config.batch_size to its micro-batch.
AutoPlan apply_auto_plan(TrainConfig& config);

}  // namespace strata
