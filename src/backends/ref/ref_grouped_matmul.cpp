// grouped_matmul and its weight gradient in double: each group's rows times its expert's weight.
#include <vector>

#include "backends/ref/ref_io.h"
#include "backends/ref/ref_ops.h"

namespace strata::ref {

namespace {

// Each group's first row, plus the total at the end; fails unless the groups fit in `rows`.
std::vector<size_t> group_starts(const std::string& op, const Tensor& group_sizes, int64_t rows) {
  const std::vector<int64_t> sizes = load_indices(group_sizes);
  std::vector<size_t> starts{0};
  for (size_t e = 0; e < sizes.size(); ++e) {
    if (sizes[e] < 0) fail("op '{}': input 'group_sizes' holds {} for expert {}, a negative count", op, sizes[e], e);
    starts.push_back(starts.back() + static_cast<size_t>(sizes[e]));
  }
  if (starts.back() > static_cast<size_t>(rows)) {
    fail("op '{}': input 'group_sizes' sums to {}, more than the {} rows", op, starts.back(), rows);
  }
  return starts;
}

void grouped_matmul(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  const std::vector<double> x = load(in[0]);
  const std::vector<double> w = load(in[1]);
  const std::vector<size_t> starts = group_starts("grouped_matmul", in[2], in[0].size(0));
  const bool trans_b = attrs.get_bool("trans_b");
  const auto k = static_cast<size_t>(in[0].size(1)), n = static_cast<size_t>(out[0].size(1));
  std::vector<double> y(static_cast<size_t>(out[0].numel()), 0.0);
  for (size_t e = 0; e + 1 < starts.size(); ++e) {
    const double* weight = w.data() + e * n * k;
    for (size_t r = starts[e]; r < starts[e + 1]; ++r) {
      for (size_t j = 0; j < n; ++j) {
        double sum = 0;
        for (size_t p = 0; p < k; ++p) sum += x[r * k + p] * (trans_b ? weight[j * k + p] : weight[p * n + j]);
        y[r * n + j] = sum;
      }
    }
  }
  store(out[0], y);
}

void grouped_matmul_weight_grad(const Tensors& in, const Tensors& out, const Attrs&) {
  const std::vector<double> a = load(in[0]);
  const std::vector<double> b = load(in[1]);
  const std::vector<size_t> starts = group_starts("grouped_matmul_weight_grad", in[2], in[0].size(0));
  const auto m = static_cast<size_t>(in[0].size(1)), n = static_cast<size_t>(in[1].size(1));
  std::vector<double> result(static_cast<size_t>(out[0].numel()), 0.0);
  for (size_t e = 0; e + 1 < starts.size(); ++e) {
    double* group = result.data() + e * m * n;
    for (size_t r = starts[e]; r < starts[e + 1]; ++r) {
      for (size_t i = 0; i < m; ++i) {
        for (size_t j = 0; j < n; ++j) group[i * n + j] += a[r * m + i] * b[r * n + j];
      }
    }
  }
  store(out[0], result);
}

}  // namespace

void register_grouped_matmul(Backend& backend) {
  add_float_kernels(backend, "grouped_matmul", grouped_matmul);
  add_float_kernels(backend, "grouped_matmul_weight_grad", grouped_matmul_weight_grad);
}

}  // namespace strata::ref
