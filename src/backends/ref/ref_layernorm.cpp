#include "backends/ref/ref_layernorm.h"

#include <cmath>

#include "backends/ref/ref_io.h"
#include "backends/ref/ref_ops.h"

namespace strata::ref {

LayerNormRows layernorm_rows(const std::vector<double>& x, const std::vector<double>& gamma,
                             const std::vector<double>& beta, double eps) {
  size_t channels = gamma.size();
  size_t rows = x.size() / channels;
  LayerNormRows result{std::vector<double>(x.size()), std::vector<double>(rows), std::vector<double>(rows)};
  for (size_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * channels;
    double sum = 0.0;
    for (size_t c = 0; c < channels; ++c) sum += row[c];
    double mean = sum / static_cast<double>(channels);
    double squares = 0.0;
    for (size_t c = 0; c < channels; ++c) squares += (row[c] - mean) * (row[c] - mean);
    double rstd = 1.0 / std::sqrt(squares / static_cast<double>(channels) + eps);
    for (size_t c = 0; c < channels; ++c) result.y[r * channels + c] = (row[c] - mean) * rstd * gamma[c] + beta[c];
    result.mean[r] = mean;
    result.rstd[r] = rstd;
  }
  return result;
}

LayerNormGrads layernorm_backward_rows(const std::vector<double>& dy, const std::vector<double>& x,
                                       const std::vector<double>& gamma, const std::vector<double>& mean,
                                       const std::vector<double>& rstd, const std::vector<double>* dres) {
  size_t channels = gamma.size();
  LayerNormGrads grads{std::vector<double>(x.size()), std::vector<double>(channels, 0.0),
                       std::vector<double>(channels, 0.0)};
  std::vector<double> xhat(channels), g(channels);
  for (size_t r = 0; r < mean.size(); ++r) {
    double g_mean = 0.0, g_xhat_mean = 0.0;
    for (size_t c = 0; c < channels; ++c) {
      size_t i = r * channels + c;
      xhat[c] = (x[i] - mean[r]) * rstd[r];
      g[c] = dy[i] * gamma[c];
      g_mean += g[c];
      g_xhat_mean += g[c] * xhat[c];
      grads.dgamma[c] += dy[i] * xhat[c];
      grads.dbeta[c] += dy[i];
    }
    g_mean /= static_cast<double>(channels);
    g_xhat_mean /= static_cast<double>(channels);
    for (size_t c = 0; c < channels; ++c) {
      size_t i = r * channels + c;
      double local = rstd[r] * (g[c] - g_mean - xhat[c] * g_xhat_mean);
      grads.dx[i] = dres != nullptr ? (*dres)[i] + local : local;
    }
  }
  return grads;
}

namespace {

void layernorm(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  LayerNormRows norm = layernorm_rows(load(in[0]), load(in[1]), load(in[2]), attrs.get_float("eps"));
  store(out[0], norm.y);
  store(out[1], norm.mean);
  store(out[2], norm.rstd);
}

void layernorm_backward(const Tensors& in, const Tensors& out, const Attrs&) {
  LayerNormGrads grads =
      layernorm_backward_rows(load(in[0]), load(in[1]), load(in[2]), load(in[3]), load(in[4]), /*dres=*/nullptr);
  store(out[0], grads.dx);
  store(out[1], grads.dgamma);
  store(out[2], grads.dbeta);
}

}  // namespace

void register_layernorm(Backend& backend) {
  add_float_kernels(backend, "layernorm", layernorm);
  add_float_kernels(backend, "layernorm_backward", layernorm_backward);
}

}  // namespace strata::ref
