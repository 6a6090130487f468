#pragma once
// `strata ops CONFIG.toml`: how a backend runs one job's training step. The trainer's own
// training graph (model family, precision policy, fusion, recomputation; one process, so
// parallel.* layouts are not applied) is resolved node by node by the same dispatcher that
// runs it, and so are the optimizer's eager ops of a step; each op's FLOPs are its schema's
// cost. The verdict: a quick switch when every op runs natively in the dtype it gets, else
// the ops that need work, their share of the step and what they fall back to.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "ops/dispatcher.h"
#include "train/config.h"

namespace strata {

// An op a decomposition runs, and its route (nullopt: no way to run it).
struct CoveragePart {
  std::string op;
  std::optional<Route> route;
};

// Identical (op, dtype, input shapes, route) runs of one step, grouped.
struct CoverageRow {
  std::string op;
  DType dtype = DType::F32;   // of the kernel-selecting input
  std::vector<Shape> shapes;  // every input's
  Route route = Route::Native;
  std::vector<CoveragePart> parts;  // Route::Decomposed: what the op's decomposition runs
  int64_t count = 0;                // runs per optimizer step
  double flops = 0;                 // of all `count` runs
  double share = 0;                 // of the step's FLOPs, 0..1
};

// The ops that are not native, grouped by (op, dtype, route): what the verdict names.
struct CoverageGap {
  std::string op;
  DType dtype = DType::F32;
  Route route = Route::Native;
  std::vector<CoveragePart> parts;
  int64_t count = 0;
  double share = 0;
};

struct ConfigCoverage {
  std::string family;
  std::string backend;
  std::string precision;  // precision.compute, its dtype's name
  int64_t batch = 0, seq = 0;
  int64_t micro_batches = 0;  // training-graph runs per optimizer step
  double step_flops = 0;      // graph runs and optimizer together
  std::vector<CoverageRow> rows;  // largest FLOP share first
  std::vector<CoverageGap> gaps;  // largest share first; empty: a quick switch
  // On a backend whose device is not the host, what its ref fallbacks copy per step (inputs to the
  // host, outputs back): the transfers the dispatcher would count.
  std::string device;  // the backend's device
  int64_t transfers_per_step = 0;
  double transfer_bytes_per_step = 0;

  bool quick_switch() const { return gaps.empty(); }
};

// The coverage of `config` as given (apply --backend and --precision to it first: `backend`,
// `precision`). Throws naming an unknown backend or an op with no route at all.
ConfigCoverage config_op_coverage(const TrainConfig& config);

// "quick switch: ..." or "needs work: ..." naming every gap, its share and its route.
std::string coverage_verdict(const ConfigCoverage& coverage);
std::string coverage_text(const ConfigCoverage& coverage);  // the table, then the verdict
nlohmann::json coverage_json(const ConfigCoverage& coverage);

}  // namespace strata
