#include <cmath>

#include "backends/ref/ref_io.h"
#include "backends/ref/ref_ops.h"

namespace strata::ref {

namespace {

void layernorm(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  double eps = attrs.get_float("eps");
  std::vector<double> x = load(in[0]);
  std::vector<double> gamma = load(in[1]);
  std::vector<double> beta = load(in[2]);
  size_t channels = gamma.size();
  size_t rows = static_cast<size_t>(out[1].numel());
  std::vector<double> y(x.size()), mean(rows), rstd(rows);
  for (size_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * channels;
    double sum = 0.0;
    for (size_t c = 0; c < channels; ++c) sum += row[c];
    mean[r] = sum / static_cast<double>(channels);
    double squares = 0.0;
    for (size_t c = 0; c < channels; ++c) squares += (row[c] - mean[r]) * (row[c] - mean[r]);
    rstd[r] = 1.0 / std::sqrt(squares / static_cast<double>(channels) + eps);
    for (size_t c = 0; c < channels; ++c) y[r * channels + c] = (row[c] - mean[r]) * rstd[r] * gamma[c] + beta[c];
  }
  store(out[0], y);
  store(out[1], mean);
  store(out[2], rstd);
}

// With xhat = (x - mean) * rstd and g = dy * gamma, per row:
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); dgamma = sum dy * xhat; dbeta = sum dy.
void layernorm_backward(const Tensors& in, const Tensors& out, const Attrs&) {
  std::vector<double> dy = load(in[0]);
  std::vector<double> x = load(in[1]);
  std::vector<double> gamma = load(in[2]);
  std::vector<double> mean = load(in[3]);
  std::vector<double> rstd = load(in[4]);
  size_t channels = gamma.size();
  size_t rows = mean.size();
  std::vector<double> dx(x.size()), dgamma(channels, 0.0), dbeta(channels, 0.0);
  std::vector<double> xhat(channels), g(channels);
  for (size_t r = 0; r < rows; ++r) {
    double g_mean = 0.0, g_xhat_mean = 0.0;
    for (size_t c = 0; c < channels; ++c) {
      size_t i = r * channels + c;
      xhat[c] = (x[i] - mean[r]) * rstd[r];
      g[c] = dy[i] * gamma[c];
      g_mean += g[c];
      g_xhat_mean += g[c] * xhat[c];
      dgamma[c] += dy[i] * xhat[c];
      dbeta[c] += dy[i];
    }
    g_mean /= static_cast<double>(channels);
    g_xhat_mean /= static_cast<double>(channels);
    for (size_t c = 0; c < channels; ++c) {
      dx[r * channels + c] = rstd[r] * (g[c] - g_mean - xhat[c] * g_xhat_mean);
    }
  }
  store(out[0], dx);
  store(out[1], dgamma);
  store(out[2], dbeta);
}

}  // namespace

void register_layernorm(Backend& backend) {
  add_float_kernels(backend, "layernorm", layernorm);
  add_float_kernels(backend, "layernorm_backward", layernorm_backward);
}

}  // namespace strata::ref
