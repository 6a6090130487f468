#pragma once
// A plan and a job's parallel.* settings (parallel/parallel_settings.h), through the registered
// dimensions: their degrees from the mesh launched or into the settings' degree keys, their options
// (sequence parallelism, the pipeline schedule) by each dimension's planner part (plan_dimension.h).
#include "parallel/parallel_settings.h"
#include "planner/search.h"

namespace strata {

// The layout a job runs: the mesh's degrees and the settings' options (the rest of the plan unset).
ParallelPlan plan_of_settings(const ParallelSettings& settings, const MeshShape& mesh);
// Every dimension's degree and options from `plan` into `settings`.
void write_plan_settings(const ParallelPlan& plan, ParallelSettings& settings);
// Holds the mesh's degrees and the settings' options fixed in `limits`.
void fix_to_settings(const ParallelSettings& settings, const MeshShape& mesh, PlanLimits& limits);

}  // namespace strata
