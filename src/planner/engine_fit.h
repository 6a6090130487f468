#pragma once
// Fitting a device's matrix engine to measured kernel times. The structure
// (compute units, tile shapes, k step, alignment levels; attention's block
// rows and head-dim step) comes from the hardware; each tile's sustained
// efficiency, the fixed cost per tile and each alignment level's slowdown are
// fitted, one set for every measured shape, by least squares on log time
// (grid searches and coordinate descent: deterministic, no per-shape fudge). `strata calibrate`'s profile of this machine
// and the GPU presets made from bench/planner/gpu measurements both go
// through here, so every device is priced by the same model.
#include <vector>

#include "planner/hardware.h"
#include "planner/workload.h"

namespace strata {

struct GemmMeasurement {
  GemmShape shape;
  double seconds = 0;  // per call, launch included
  double weight = 1;   // in the fit's loss (a sweep of many near-equal shapes counts as one family)
};

struct AttentionMeasurement {
  AttentionShape shape;
  double flops = 0;    // as the op's schema counts them (causal)
  double seconds = 0;  // per call, launch included
};

// How well the fitted engine predicts the measurements it was fitted to.
struct FitQuality {
  size_t samples = 0;
  double median_abs_error = 0;  // |predicted / measured - 1|
  double max_abs_error = 0;
};

// `perf` holds the peak and the engine's structure (its tile efficiencies are
// the starting point); the tile efficiencies, tile overhead and alignment
// efficiencies are replaced by the best fit. `launch_s` is the device's
// per-call overhead.
FitQuality fit_gemm_engine(DTypePerformance& perf, const std::vector<GemmMeasurement>& samples, double launch_s);

// Fits attention_efficiency / attention_backward_efficiency and the per-tile
// overhead; a pass with no samples takes the other's efficiency.
FitQuality fit_attention_engine(DTypePerformance& perf, const std::vector<AttentionMeasurement>& samples,
                                double launch_s);

}  // namespace strata
