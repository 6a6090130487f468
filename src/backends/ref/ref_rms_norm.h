#pragma once
// The rms_norm formulas in double, shared by ref_rms_norm.cpp and the fused
// add_rms_norm / rms_norm_backward_add of ref_fused.cpp, so the fused ops give
// the bits of the unfused ones. Rows hold weight.size() values; `dtype` is
// x's, to which the normalised value is rounded before the weight multiplies
// it (HuggingFace's LlamaRMSNorm).
#include <vector>

#include "core/dtype.h"

namespace strata::ref {

// y = weight * round(x * rstd), rstd = 1 / sqrt(mean(x^2) + eps) per row.
std::vector<double> rms_norm_rows(const std::vector<double>& x, const std::vector<double>& weight, double eps,
                                  DType dtype);

struct RmsNormGrads {
  std::vector<double> dx, dweight;
};

// With h = x * rstd and g = dy * weight, per row: dx = rstd * (g - h * mean(g * h)),
// plus dres[i] when dres is given; dweight = sum dy * round(h).
RmsNormGrads rms_norm_backward_rows(const std::vector<double>& dy, const std::vector<double>& x,
                                    const std::vector<double>& weight, double eps, DType dtype,
                                    const std::vector<double>* dres);

}  // namespace strata::ref
