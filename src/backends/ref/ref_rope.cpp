// rope in double, with the roundings of PyTorch's evaluation in x's dtype:
// cos and sin (f32, ops/rope_frequencies.h) rounded to x's dtype, each product
// rounded to it, then the sum rounded on store (through f32 for bf16 and f16,
// as PyTorch computes their arithmetic).
#include "backends/ref/ref_io.h"
#include "backends/ref/ref_ops.h"
#include "ops/rope_frequencies.h"

namespace strata::ref {

namespace {

void rope(const Tensors& in, const Tensors& out, const Attrs& attrs) {
  RopeParams params = rope_params("rope", attrs);
  std::vector<float> inv_freq = rope_inv_freq(params);
  std::vector<double> x = load(in[0]);
  std::vector<int64_t> positions = load_indices(in[1]);
  DType dtype = in[0].dtype();
  const size_t seq = positions.size(), dim = static_cast<size_t>(params.head_dim), half = dim / 2;
  const size_t heads = static_cast<size_t>(in[0].size(2)) / dim;
  std::vector<double> y(x.size());
  for (size_t row = 0; row < x.size() / (heads * dim); ++row) {  // row = b * T + t
    for (size_t i = 0; i < half; ++i) {
      RopeCosSin angle = rope_cos_sin(positions[row % seq], inv_freq[i], params.inverse);
      double cos = round_to(dtype, angle.cos), sin = round_to(dtype, angle.sin);
      for (size_t h = 0; h < heads; ++h) {
        size_t first = (row * heads + h) * dim + i, second = first + half;
        y[first] = round_to(dtype, x[first] * cos) - round_to(dtype, x[second] * sin);
        y[second] = round_to(dtype, x[second] * cos) + round_to(dtype, x[first] * sin);
      }
    }
  }
  store(out[0], y);
}

}  // namespace

void register_rope(Backend& backend) { add_float_kernels(backend, "rope", rope); }

}  // namespace strata::ref
