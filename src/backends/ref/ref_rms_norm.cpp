#include "backends/ref/ref_rms_norm.h"

#include <cmath>

#include "backends/ref/ref_io.h"
#include "backends/ref/ref_ops.h"

namespace strata::ref {

namespace {

double row_rstd(const double* row, size_t channels, double eps) {
  double squares = 0.0;
  for (size_t c = 0; c < channels; ++c) squares += row[c] * row[c];
  return 1.0 / std::sqrt(squares / static_cast<double>(channels) + eps);
}

}  // namespace

std::vector<double> rms_norm_rows(const std::vector<double>& x, const std::vector<double>& weight, double eps,
                                  DType dtype) {
  size_t channels = weight.size();
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / channels; ++r) {
    const double* row = x.data() + r * channels;
    double rstd = row_rstd(row, channels, eps);
    for (size_t c = 0; c < channels; ++c) y[r * channels + c] = weight[c] * round_to(dtype, row[c] * rstd);
  }
  return y;
}

RmsNormGrads rms_norm_backward_rows(const std::vector<double>& dy, const std::vector<double>& x,
                                    const std::vector<double>& weight, double eps, DType dtype,
                                    const std::vector<double>* dres) {
  size_t channels = weight.size();
  RmsNormGrads grads{std::vector<double>(x.size()), std::vector<double>(channels, 0.0)};
  for (size_t r = 0; r < x.size() / channels; ++r) {
    const double* row = x.data() + r * channels;
    const double* dy_row = dy.data() + r * channels;
    double rstd = row_rstd(row, channels, eps);
    double mean_gh = 0.0;
    for (size_t c = 0; c < channels; ++c) {
      double h = row[c] * rstd;
      mean_gh += dy_row[c] * weight[c] * h;
      grads.dweight[c] += dy_row[c] * round_to(dtype, h);
    }
    mean_gh /= static_cast<double>(channels);
    for (size_t c = 0; c < channels; ++c) {
      size_t i = r * channels + c;
      double local = rstd * (dy_row[c] * weight[c] - row[c] * rstd * mean_gh);
      grads.dx[i] = dres != nullptr ? (*dres)[i] + local : local;
    }
  }
  return grads;
}

namespace {

void rms_norm(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  store(out[0], rms_norm_rows(load(in[0]), load(in[1]), attrs.get_float("eps"), in[0].dtype()));
}

void rms_norm_backward(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  RmsNormGrads grads =
      rms_norm_backward_rows(load(in[0]), load(in[1]), load(in[2]), attrs.get_float("eps"), in[1].dtype(), nullptr);
  store(out[0], grads.dx);
  store(out[1], grads.dweight);
}

}  // namespace

void register_rms_norm(Backend& backend) {
  add_float_kernels(backend, "rms_norm", rms_norm);
  add_float_kernels(backend, "rms_norm_backward", rms_norm_backward);
}

}  // namespace strata::ref
