#pragma once
// A side of `strata compare` that runs under a parallel layout (parallel.dp, tp or pp above 1, any
// ZeRO stage or schedule): `strata train` runs it, as that many ranks, with --capture-graph (each
// rank's tensors of the first step's first micro-batch, put back together whole: rank_dump.h), and
// for the steps asked, one launch per step, each saving its checkpoint into scratch space and the next
// resuming from it (only the newest kept); the comparison also reads each step's loss and gradient norm
// (metrics.jsonl) and every parameter after it,
// assembled to its global shape from the checkpoint's pieces by their boxes (a checkpoint does not
// depend on the layout that saved it). Both sides start where the config says: the seed,
// model.init_from, or a copy of the newest checkpoint of checkpoint.dir (which is never written).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "compare/capture.h"
#include "train/config.h"

namespace strata {

// Runs `strata <train_args>` as `ranks` processes and waits; fails, with the end of its output,
// when the run fails. The command layer provides it (it knows the executable and mpirun).
using TrainLauncher = std::function<void(int ranks, const std::vector<std::string>& train_args)>;

// Processes a config's layout runs on: dp (at least 1) x tp x pp.
int layout_ranks(const TrainConfig& config);

// `overrides` are the side's --set assignments of `config_path`, which gave `config`; `work` is
// an empty directory for the side's run; `steps` 0 compares the first micro-batch's graph only.
void capture_layout_steps(const std::string& config_path, const std::vector<std::string>& overrides,
                          const TrainConfig& config, int64_t steps, const std::filesystem::path& work,
                          const TrainLauncher& launch, const CaptureSink& sink);

}  // namespace strata
