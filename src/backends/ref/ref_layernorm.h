#pragma once
// The layernorm formulas in double, shared by ref_layernorm.cpp and the fused
// add_layernorm / layernorm_backward_add of ref_fused.cpp, so the fused ops
// give the bits of the unfused ones. Rows hold gamma.size() values.
#include <vector>

namespace strata::ref {

struct LayerNormRows {
  std::vector<double> y, mean, rstd;
};

LayerNormRows layernorm_rows(const std::vector<double>& x, const std::vector<double>& gamma,
                             const std::vector<double>& beta, double eps);

struct LayerNormGrads {
  std::vector<double> dx, dgamma, dbeta;
};

// With xhat = (x - mean) * rstd and g = dy * gamma, per row:
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), plus dres[i] when dres
// is given; dgamma = sum dy * xhat; dbeta = sum dy.
LayerNormGrads layernorm_backward_rows(const std::vector<double>& dy, const std::vector<double>& x,
                                       const std::vector<double>& gamma, const std::vector<double>& mean,
                                       const std::vector<double>& rstd, const std::vector<double>* dres);

}  // namespace strata::ref
