#pragma once
// `strata compare`: two runs of one config, each with its own overrides (side
// a the baseline, side b the candidate), or side b against a golden dump
// (tools/torch_dump.py), compared tensor by tensor. When either side uses a
// parallel layout, both run as `strata train` does (layout_runs.h) and are
// compared step by step: loss, gradient norm and every whole parameter.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "compare/comparison.h"
#include "compare/layout_runs.h"
#include "compare/report.h"

namespace strata {

struct CompareRequest {
  std::string config;               // a TOML file; its [compare] table sets the tolerances
  std::vector<std::string> common;  // key=value overrides of both sides
  std::vector<std::string> a, b;    // of one side
  int64_t steps = 0;                // also compare this many steps' loss, gradient norm and parameters
  std::string golden;               // a golden dump replacing side a
  TrainLauncher launch_train;       // runs the sides that use a parallel layout (layout_runs.h)
  // Which ops to re-run in f64 and judge against that truth (truth.h); only where side a runs in this
  // process (one rank, no golden dump). `explain`: a tensor whose judgement is printed in full.
  Rerun rerun = Rerun::Failing;
  std::string explain;
};

struct CompareOutcome {
  Comparison comparison;
  ComparisonHeader header;
};

CompareOutcome compare_runs(const CompareRequest& request);

// What tools/torch_dump.py reads: side b's initial parameters as a HuggingFace model directory
// (config.json, model.safetensors) and its first micro-batch (batch.safetensors: tokens, targets).
void write_golden_inputs(const CompareRequest& request, const std::filesystem::path& out);

// The names of a golden dump's batch tensors (every other tensor is compared by its name).
inline constexpr const char* kGoldenTokens = "tokens";
inline constexpr const char* kGoldenTargets = "targets";

}  // namespace strata
