#include "compare/metrics.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace strata {

TensorMetrics compare_tensors(const Tensor& a, const Tensor& b, double a_factor, double b_factor) {
  STRATA_CHECK(a.numel() == b.numel(), "comparing {} elements with {}", a.numel(), b.numel());
  const Tensor wide_a = a.to(DType::F64), wide_b = b.to(DType::F64);
  const double* x = wide_a.data<double>();
  const double* y = wide_b.data<double>();
  TensorMetrics m;
  m.count = a.numel();
  double dot = 0, norm_a = 0, norm_b = 0, squares = 0;
  int64_t compared = 0, within = 0;
  for (int64_t i = 0; i < m.count; ++i) {
    const double u = x[i] * a_factor, v = y[i] * b_factor;
    if (!std::isfinite(u) || !std::isfinite(v)) {
      const bool same = std::isnan(u) ? std::isnan(v) : u == v;
      if (!same) ++m.nonfinite_mismatches;
      continue;
    }
    const double diff = std::abs(v - u);
    const double rel = diff / (u == 0 ? kRelativeEpsilon : std::abs(u));
    dot += u * v;
    norm_a += u * u;
    norm_b += v * v;
    squares += diff * diff;
    m.max_abs = std::max(m.max_abs, diff);
    m.max_rel = std::max(m.max_rel, rel);
    m.scale = std::max(m.scale, std::abs(u));
    within += rel < 1e-3;
    ++compared;
  }
  if (m.count == 1) {
    m.cosine = std::numeric_limits<double>::quiet_NaN();
  } else if (norm_a == 0 || norm_b == 0) {
    m.cosine = norm_a == norm_b ? 1.0 : 0.0;
  } else {
    m.cosine = dot / (std::sqrt(norm_a) * std::sqrt(norm_b));
  }
  m.rmse = compared > 0 ? std::sqrt(squares / static_cast<double>(compared)) : 0;
  m.within_1e3 = compared > 0 ? static_cast<double>(within) / static_cast<double>(compared) : 1;
  return m;
}

}  // namespace strata
