#pragma once
// `strata calibrate`: measures this machine for the cost model. Compute runs
// in one process through the op dispatcher (the kernels training uses):
// GEMMs over the shapes a transformer layer makes (forward, input-gradient
// and weight-gradient forms), fused attention, GELU for element-wise
// arithmetic, a streaming add for memory bandwidth, a tiny op for dispatch
// overhead; then every op inside a small GPT-2 training graph against what
// those figures predict for it (the per-op efficiency); per thread count and
// dtype (dtypes the backend has no native kernels for are skipped and
// reported). Each figure is the fastest of several runs. Links need several
// processes: under mpirun the communication layer's probe measures them.
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "planner/profile.h"

namespace strata {

struct CalibrationOptions {
  std::string backend = "cpu";
  std::vector<int> threads;  // empty: 1 and every core
  std::vector<DType> dtypes = {DType::F32, DType::BF16};
  double seconds_per_kernel = 0.15;  // timing budget of one measurement
};

using ProgressFn = std::function<void(const std::string& line)>;

// Measures compute; `skipped` receives one line per dtype that could not be measured.
HardwareProfile calibrate_compute(const CalibrationOptions& options, const ProgressFn& progress,
                                  std::vector<std::string>& skipped);

// Collective over `world` (at least 2 ranks): the link figures the
// communication layer's probe measures.
LinkProfile calibrate_links(comm::Communicator& world);

}  // namespace strata
