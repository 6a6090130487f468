#pragma once
// The figures `strata compare` gives for one tensor of two runs, computed in
// f64 after converting both sides (msprobe's set): cosine similarity, the
// largest absolute and relative error, the root-mean-square error and the
// share of elements whose relative error is below 1e-3.
#include <cstdint>

#include "core/tensor.h"

namespace strata {

struct TensorMetrics {
  int64_t count = 0;
  // NaN where undefined: a tensor of one element (its cosine is only a sign).
  // Two all-zero tensors have cosine 1; one all-zero tensor against another, 0.
  double cosine = 0;
  double max_abs = 0;    // max |b - a|
  double max_rel = 0;    // max |b - a| / |a|, an exact zero of a read as kRelativeEpsilon
  double rmse = 0;       // sqrt(mean((b - a)^2))
  double within_1e3 = 0; // share of elements with relative error < 1e-3
  double scale = 0;      // max |a|: what the tolerance's rtol is relative to
  // Elements finite on one side only, or non-finite and different on both (inf vs nan, +inf vs -inf);
  // non-finite elements equal on both sides count as agreeing and stay out of the other figures.
  int64_t nonfinite_mismatches = 0;
};

// An exact zero of the baseline divides by this instead (msprobe shifts zeros by an epsilon).
inline constexpr double kRelativeEpsilon = 1e-12;

// `a` is the baseline, `b` the candidate; both are multiplied by their factor
// (the backward pass's seed is divided out), same element count.
TensorMetrics compare_tensors(const Tensor& a, const Tensor& b, double a_factor = 1, double b_factor = 1);

}  // namespace strata
