#pragma once
// The plan a run records in plan.json. `parallel.plan = "auto"`: asks the planner for the best layout of this job
// on the configured hardware, within what the runtime executes for the ranks
// it was launched with (data parallelism over all of them, no ZeRO, no
// recomputation: the planner chooses the micro-batch), and applies it.
#include <filesystem>

#include "parallel/device_mesh.h"
#include "planner/auto_plan.h"
#include "train/config.h"

namespace strata {

struct AppliedPlan {
  AutoPlan plan;
  std::string summary;  // the start-up line: the chosen plan and its prediction
};

// The peak matrix FLOP/s of the job's `ranks` ranks in the run's precision,
// that model FLOPs utilisation is measured against: parallel.cluster's device
// (a cluster file from `strata calibrate`: the GEMM rate measured with the rank's
// threads) times the ranks, with its source for the report. 0 without
// parallel.cluster (no preset knows this CPU's peak well enough) or without
// figures for the dtype.
struct PeakFlops {
  double flops = 0;
  std::string source;
};
PeakFlops peak_flops(const TrainConfig& config, int ranks, int threads_per_rank);

// Threads per rank: ops.threads, or with 0 the host's cores shared among the
// job's ranks on it; fails naming the key when the count is absurd for the machine.
int threads_per_rank(const TrainConfig& config, int ranks_on_this_host);

// parallel.plan = "auto" before the ranks are arranged in a mesh: the
// planner's layout of the job's `ranks` among those the runtime executes
// (dp, tp, pp, ep, sp, GPipe, 1F1B or interleaved), written into
// config's parallel.* keys. The trainer then applies the plan on that mesh.
void choose_auto_layout(TrainConfig& config, int ranks, int threads_per_rank);

// Chooses the plan for the `mesh` of ranks launched, of `threads_per_rank`
// threads (0: as the profile was measured) on one host, and sets
// config.batch_size to its micro-batch.
AppliedPlan apply_auto_plan(TrainConfig& config, const MeshShape& mesh, int threads_per_rank);
// The layout the config fixes (`parallel.plan = "manual"`) on the `mesh` of
// ranks launched, with the planner's prediction when parallel.cluster names the hardware.
AppliedPlan describe_manual_plan(const TrainConfig& config, const MeshShape& mesh, int threads_per_rank);

}  // namespace strata
